/**
 * A network made of Linux network namespaces (issue 25, item 5): a router namespace R and one namespace per member
 * (etcd, each idgen node, the caller), each joined to R by a veth pair on its own /24 (10.231.<i>.0/24: R is .1,
 * the member .2). A partition is a silent drop in R (`ip rule … blackhole` both ways for the member's address), so
 * the sender's kernel sees no ACK, retransmits, and delivers what it had queued once the rules are gone: the
 * silence of a real network, unlike the TCP proxy (which reads and drops, and closes on restore).
 *
 * Needs root and iproute2 (`ip netns`); {@link createNetnsNetwork} throws naming them when they are missing.
 * Namespace names carry a random suffix after {@link NETNS_PREFIX}; `sweepStaleNamespaces` deletes leftovers.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { spawnProcess, type ProcessHandle } from '@idgen/testing';

/** Prefix of every namespace this fixture makes. */
export const NETNS_PREFIX = 'idgnns';

export const NETNS_MISSING_MESSAGE =
  'network namespaces unavailable: the netns partition needs root and iproute2 (`ip netns add`, veth pairs)';

function ip(args: readonly string[], ns?: string): string {
  const argv = ns === undefined ? [...args] : ['netns', 'exec', ns, 'ip', ...args];
  return execFileSync('ip', argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000 });
}

/** One member namespace. */
export interface NetnsMember {
  readonly ns: string;
  /** Its address (10.231.<i>.2). */
  readonly address: string;
  /** Starts `cmd args` inside the namespace (`ip netns exec`, which execs: the pid is the command's). */
  spawn(cmd: string, args: readonly string[], env?: NodeJS.ProcessEnv, maxLines?: number): ProcessHandle;
}

export interface NetnsNetwork {
  readonly router: string;
  member(name: string): NetnsMember;
  /** Silently drops, in the router, every packet to or from the member (both directions). */
  cut(name: string): void;
  /** Deletes the drop rules. */
  heal(name: string): void;
  isCut(name: string): boolean;
  /** Kills the processes started here and deletes every namespace. */
  destroy(): Promise<void>;
}

/** Deletes namespaces with {@link NETNS_PREFIX} left over by a crashed run. */
export function sweepStaleNamespaces(): void {
  let list = '';
  try {
    list = ip(['netns', 'list']);
  } catch {
    return;
  }
  for (const line of list.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    if (!name.startsWith(NETNS_PREFIX)) continue;
    // Only those of dead runs: a live run's pid is in its name.
    const pid = Number(name.split('-')[1]);
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid)) continue;
    try {
      ip(['netns', 'del', name]);
    } catch {
      // already gone
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Creates the router and one namespace per name in `members` (in order: subnets 10.231.1…n). */
export function createNetnsNetwork(members: readonly string[]): NetnsNetwork {
  sweepStaleNamespaces();
  const tag = `${NETNS_PREFIX}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const router = `${tag}-r`;
  const made: string[] = [];
  const procs: ProcessHandle[] = [];
  const byName = new Map<string, NetnsMember>();
  const cuts = new Set<string>();
  const destroy = async (): Promise<void> => {
    await Promise.all(procs.map((p) => p.kill().catch(() => undefined)));
    for (const ns of made.reverse()) {
      try {
        ip(['netns', 'del', ns]);
      } catch {
        // gone
      }
    }
    made.length = 0;
  };
  try {
    try {
      ip(['netns', 'add', router]);
    } catch (e) {
      throw new Error(`${NETNS_MISSING_MESSAGE}: ${String((e as { stderr?: unknown }).stderr ?? e).trim()}`);
    }
    made.push(router);
    ip(['link', 'set', 'lo', 'up'], router);
    execFileSync('ip', ['netns', 'exec', router, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1'], { timeout: 10_000 });
    members.forEach((name, k) => {
      const i = k + 1;
      const ns = `${tag}-${name}`;
      ip(['netns', 'add', ns]);
      made.push(ns);
      ip(['link', 'add', `v${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns], router);
      ip(['addr', 'add', `10.231.${i}.1/24`, 'dev', `v${i}`], router);
      ip(['link', 'set', `v${i}`, 'up'], router);
      ip(['link', 'set', 'lo', 'up'], ns);
      ip(['addr', 'add', `10.231.${i}.2/24`, 'dev', 'eth0'], ns);
      ip(['link', 'set', 'eth0', 'up'], ns);
      ip(['route', 'add', 'default', 'via', `10.231.${i}.1`], ns);
      byName.set(name, {
        ns,
        address: `10.231.${i}.2`,
        spawn(cmd, args, env, maxLines) {
          const p = spawnProcess('ip', ['netns', 'exec', ns, cmd, ...args], {
            env: env ?? process.env,
            maxLines: maxLines ?? 100_000,
          });
          procs.push(p);
          return p;
        },
      });
    });
  } catch (e) {
    void destroy();
    throw e;
  }
  const member = (name: string): NetnsMember => {
    const m = byName.get(name);
    if (m === undefined) throw new Error(`no member ${name}`);
    return m;
  };
  return {
    router,
    member,
    cut(name) {
      const a = member(name).address;
      ip(['rule', 'add', 'from', `${a}/32`, 'blackhole', 'priority', '100'], router);
      ip(['rule', 'add', 'to', `${a}/32`, 'blackhole', 'priority', '101'], router);
      cuts.add(name);
    },
    heal(name) {
      const a = member(name).address;
      ip(['rule', 'del', 'from', `${a}/32`, 'blackhole', 'priority', '100'], router);
      ip(['rule', 'del', 'to', `${a}/32`, 'blackhole', 'priority', '101'], router);
      cuts.delete(name);
    },
    isCut: (name) => cuts.has(name),
    destroy,
  };
}

/**
 * A caller inside a namespace: a Node process (`node -e`) that takes one JSON request a line on stdin
 * (`{id, url, body, timeoutMs}`: a POST with a JSON body, over keep-alive HTTP/1.1) and answers one JSON line
 * (`{id, status?, body?, error?, ms}`). Its connections live in the caller's namespace, so a cut leaves its
 * requests in its own socket buffers.
 */
const AGENT = `
const rl = require('node:readline').createInterface({ input: process.stdin });
rl.on('line', async (line) => {
  const q = JSON.parse(line); const t0 = Date.now();
  try {
    const res = await fetch(q.url, { method: 'POST', body: JSON.stringify(q.body), headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(q.timeoutMs) });
    const body = await res.text();
    process.stdout.write(JSON.stringify({ id: q.id, status: res.status, body, ms: Date.now() - t0 }) + '\\n');
  } catch (e) {
    process.stdout.write(JSON.stringify({ id: q.id, error: String(e && e.name) + ': ' + String(e && e.message), ms: Date.now() - t0 }) + '\\n');
  }
});
`;

export interface AgentAnswer {
  readonly status?: number;
  readonly body?: string;
  readonly error?: string;
  readonly ms: number;
}

export interface NetnsCaller {
  post(url: string, body: unknown, timeoutMs: number): Promise<AgentAnswer>;
  close(): void;
}

/** Starts the caller agent in `m`; `close()` kills it (also on process exit). */
export function startCaller(m: NetnsMember): NetnsCaller {
  const proc = spawn('ip', ['netns', 'exec', m.ns, process.execPath, '-e', AGENT], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const waiting = new Map<number, (a: AgentAnswer) => void>();
  let next = 0;
  let buf = '';
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (d: string) => {
    buf += d;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const a = JSON.parse(buf.slice(0, nl)) as AgentAnswer & { id: number };
      buf = buf.slice(nl + 1);
      waiting.get(a.id)?.(a);
      waiting.delete(a.id);
    }
  });
  const kill = (): void => void proc.kill('SIGKILL');
  process.once('exit', kill);
  return {
    close() {
      process.off('exit', kill);
      kill();
    },
    post(url, body, timeoutMs) {
      const id = next++;
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          waiting.delete(id);
          resolve({ error: 'agent: no answer', ms: timeoutMs + 2000 });
        }, timeoutMs + 2000);
        waiting.set(id, (a) => {
          clearTimeout(timer);
          resolve(a);
        });
        proc.stdin.write(`${JSON.stringify({ id, url, body, timeoutMs })}\n`);
      });
    },
  };
}
