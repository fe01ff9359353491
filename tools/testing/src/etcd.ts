import { get as httpsGet } from 'node:https';
import type { TestPki } from './tls.js';
import { execFile, execFileSync } from 'node:child_process';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, tempDir } from './net.js';
import type { TempDir } from './net.js';
import { findOnPath } from './find-on-path.js';
import { spawnProcess } from './process.js';
import type { ProcessExit, ProcessHandle } from './process.js';
import { track } from './registry.js';

const execFileAsync = promisify(execFile);

/** The message when `etcd` is missing: tests fail and say what to install, never skip (preamble). */
export const ETCD_MISSING_MESSAGE =
  "etcd not found on PATH: install Debian's etcd-server (apt-get install etcd-server etcd-client)";

function etcdBinary(): string {
  const found = findOnPath('etcd');
  if (found === undefined) throw new Error(ETCD_MISSING_MESSAGE);
  return found;
}

/** Options of {@link startEtcd}. */
export interface StartEtcdOptions {
  /** Data directory (created mode 700 if missing, kept on stop); default a temp dir removed on stop. */
  dataDir?: string;
  /** Member name; default `n1`. */
  name?: string;
  /** How long to wait for `/health`; default 15000 ms. */
  readyTimeoutMs?: number;
  /**
   * Client TLS: etcd serves `https://` with the PKI's server certificate; with `clientCertAuth` it also
   * requires a client certificate signed by the PKI's CA (etcd's `--client-cert-auth`).
   */
  tls?: { pki: TestPki; clientCertAuth?: boolean };
  /** More etcd flags (e.g. `['--bcrypt-cost', '4']`: quicker password checks for a test etcd with auth). */
  extraArgs?: readonly string[];
}

/** A running single-member etcd. */
export interface EtcdServer {
  /** `127.0.0.1:PORT` (client port). */
  readonly endpoint: string;
  /** `http://127.0.0.1:PORT`, what the `etcd3` client takes as a host. */
  readonly clientUrl: string;
  readonly pid: number;
  readonly dataDir: string;
  readonly process: ProcessHandle;
  /** SIGTERM, wait, remove the data dir if the harness created it. */
  stop(): Promise<void>;
  /** SIGSTOP: etcd stops answering but keeps its connections, like a stalled server. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** SIGKILL (data dir kept until stop/cleanup). */
  kill(): Promise<ProcessExit>;
  /** Stops (SIGTERM) or, if `hard`, kills the process, then starts it again on the same ports and data dir. */
  restart(options?: { hard?: boolean; downMs?: number }): Promise<void>;
  /** `etcdctl snapshot save FILE`, as an operator's backup does (plaintext etcd only). */
  snapshot(file: string): Promise<void>;
  /**
   * An operator's disaster recovery: stops etcd, replaces its data dir with `etcdctl snapshot restore FILE` (on the same
   * name and peer URL, with `clusterToken`, default the original token: then the cluster ID stays the same), waits
   * `downMs`, and starts it again on the same ports.
   */
  restore(file: string, options?: { clusterToken?: string; downMs?: number }): Promise<void>;
}

interface MemberPorts {
  name: string;
  clientPort: number;
  peerPort: number;
}

function memberArgs(
  m: MemberPorts,
  dataDir: string,
  initialCluster: string,
  clusterToken: string,
  tls?: StartEtcdOptions['tls'],
  extraArgs: readonly string[] = [],
): string[] {
  const client = `${tls === undefined ? 'http' : 'https'}://127.0.0.1:${m.clientPort}`;
  const peer = `http://127.0.0.1:${m.peerPort}`;
  const secure =
    tls === undefined
      ? []
      : [
          '--cert-file',
          tls.pki.server.certFile,
          '--key-file',
          tls.pki.server.keyFile,
          '--trusted-ca-file',
          tls.pki.caFile,
          ...(tls.clientCertAuth === true ? ['--client-cert-auth'] : []),
        ];
  return [
    ...secure,
    '--name',
    m.name,
    '--data-dir',
    dataDir,
    '--listen-client-urls',
    client,
    '--advertise-client-urls',
    client,
    '--listen-peer-urls',
    peer,
    '--initial-advertise-peer-urls',
    peer,
    '--initial-cluster',
    initialCluster,
    '--initial-cluster-state',
    'new',
    '--initial-cluster-token',
    clusterToken,
    '--log-level',
    'warn',
    '--logger',
    'zap',
    ...extraArgs,
  ];
}

/** Asks `GET {clientUrl}/health`; true when etcd says `"health":"true"`. `tls`: CA and client certificate for https. */
export async function etcdHealthy(
  clientUrl: string,
  timeoutMs = 1000,
  tls?: StartEtcdOptions['tls'],
): Promise<boolean> {
  if (tls !== undefined) return httpsHealthy(clientUrl, timeoutMs, tls.pki);
  try {
    const res = await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    const body = (await res.json()) as { health?: unknown };
    return body.health === 'true' || body.health === true;
  } catch {
    return false;
  }
}

function httpsHealthy(clientUrl: string, timeoutMs: number, pki: TestPki): Promise<boolean> {
  const client = Object.values(pki.clients)[0] ?? pki.server;
  return new Promise((resolve) => {
    const req = httpsGet(
      `${clientUrl}/health`,
      { ca: pki.ca, cert: client.cert, key: client.key, timeout: timeoutMs },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve(/"health":\s*"?true/.test(body)));
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

async function waitHealthy(
  proc: ProcessHandle,
  clientUrl: string,
  timeoutMs: number,
  what: string,
  tls?: StartEtcdOptions['tls'],
): Promise<void> {
  const start = Date.now();
  for (;;) {
    const ended = proc.exitStatus();
    if (ended !== undefined) {
      throw new Error(
        `${what} exited before it was healthy (code ${ended.code}, signal ${ended.signal}); stderr tail:\n` +
          proc.stderrLines.slice(-20).join('\n'),
      );
    }
    if (await etcdHealthy(clientUrl, 500, tls)) return;
    if (Date.now() - start > timeoutMs) {
      throw new Error(
        `${what} not healthy at ${clientUrl}/health after ${timeoutMs} ms; stderr tail:\n` +
          proc.stderrLines.slice(-20).join('\n'),
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Starts a process again on ports it held before (a restart) and waits until it is healthy. While it was down
 * its port can be taken for a moment by another socket (an outgoing connection's ephemeral port: the test
 * ports come from the same range), and etcd then exits with "address already in use": that start is tried
 * again, every 250 ms for up to ~5 s, before the error goes to the test (seen once in CI in etcd.spec.ts).
 */
async function startAgainHealthy(
  spawn: () => ProcessHandle,
  clientUrl: string,
  timeoutMs: number,
  what: string,
  tls?: StartEtcdOptions['tls'],
): Promise<ProcessHandle> {
  for (let attempt = 1; ; attempt++) {
    const proc = spawn();
    try {
      await waitHealthy(proc, clientUrl, timeoutMs, what, tls);
      return proc;
    } catch (e) {
      const portTaken =
        proc.exitStatus() !== undefined && proc.stderrLines.some((l) => l.includes('address already in use'));
      if (!portTaken || attempt >= 20) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

async function prepareDataDir(dataDir: string | undefined, prefix: string): Promise<{ dir: string; owned?: TempDir }> {
  if (dataDir !== undefined) {
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    return { dir: dataDir };
  }
  const owned = await tempDir(prefix);
  return { dir: owned.path, owned };
}

/**
 * Starts one real `etcd` on free 127.0.0.1 ports with a temporary data directory (mode 700) and waits until
 * `/health` says healthy. Throws {@link ETCD_MISSING_MESSAGE} when `etcd` is not on PATH.
 */
export async function startEtcd(options: StartEtcdOptions = {}): Promise<EtcdServer> {
  const binary = etcdBinary();
  const name = options.name ?? 'n1';
  const ports: MemberPorts = { name, clientPort: await freePort(), peerPort: await freePort() };
  const { dir, owned } = await prepareDataDir(options.dataDir, 'idgen-etcd');
  const clientUrl = `${options.tls === undefined ? 'http' : 'https'}://127.0.0.1:${ports.clientPort}`;
  const initialCluster = `${name}=http://127.0.0.1:${ports.peerPort}`;
  const clusterToken = `idgen-test-${ports.clientPort}`;
  const args = memberArgs(ports, dir, initialCluster, clusterToken, options.tls, options.extraArgs);
  let proc = spawnProcess(binary, args);
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    untrack();
    await proc.stop(5000);
    await owned?.remove();
  };
  const untrack = track({ cleanup: stop, cleanupSync: () => undefined /* the process and dir hooks cover it */ });
  const readyTimeoutMs = options.readyTimeoutMs ?? 15_000;
  try {
    await waitHealthy(proc, clientUrl, readyTimeoutMs, `etcd ${name}`, options.tls);
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    endpoint: `127.0.0.1:${ports.clientPort}`,
    clientUrl,
    get pid() {
      return proc.pid;
    },
    dataDir: dir,
    get process() {
      return proc;
    },
    stop,
    pause: () => proc.signal('SIGSTOP'),
    resume: () => proc.signal('SIGCONT'),
    kill: () => proc.kill(),
    async snapshot(file) {
      if (options.tls !== undefined) throw new Error('snapshot() drives a plaintext etcd only');
      execFileSync('etcdctl', ['--endpoints', clientUrl, 'snapshot', 'save', file], {
        env: { ...process.env, ETCDCTL_API: '3' },
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 30_000,
      });
    },
    async restore(file, o = {}) {
      if (stopped) throw new Error(`etcd ${name} was stopped; start a new one`);
      await proc.stop(5000);
      await rm(dir, { recursive: true, force: true });
      execFileSync(
        'etcdctl',
        [
          'snapshot',
          'restore',
          file,
          '--name',
          name,
          '--data-dir',
          dir,
          '--initial-cluster',
          initialCluster,
          '--initial-advertise-peer-urls',
          `http://127.0.0.1:${ports.peerPort}`,
          '--initial-cluster-token',
          o.clusterToken ?? clusterToken,
        ],
        { env: { ...process.env, ETCDCTL_API: '3' }, stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 },
      );
      if (o.downMs !== undefined) await new Promise((r) => setTimeout(r, o.downMs));
      await startAgainHealthy(
        () => (proc = spawnProcess(binary, args)),
        clientUrl,
        readyTimeoutMs,
        `etcd ${name} (restored)`,
        options.tls,
      );
    },
    async restart(o = {}) {
      if (stopped) throw new Error(`etcd ${name} was stopped; start a new one`);
      if (o.hard === true) await proc.kill();
      else await proc.stop(5000);
      if (o.downMs !== undefined) await new Promise((r) => setTimeout(r, o.downMs));
      await startAgainHealthy(
        () => (proc = spawnProcess(binary, args)),
        clientUrl,
        readyTimeoutMs,
        `etcd ${name} (restarted)`,
        options.tls,
      );
    },
  };
}

/** `etcdctl ARGS` (API v3) without blocking the event loop; rejects with its stderr after 30 s or a failure. */
async function etcdctlAsync(args: readonly string[]): Promise<string> {
  try {
    const { stdout } = await execFileAsync('etcdctl', [...args], {
      env: { ...process.env, ETCDCTL_API: '3' },
      timeout: 30_000,
    });
    return stdout;
  } catch (e) {
    const stderr = (e as { stderr?: unknown }).stderr;
    throw new Error(
      `etcdctl ${args.join(' ')}: ${typeof stderr === 'string' && stderr !== '' ? stderr.trim() : String(e)}`,
    );
  }
}

/** One member of a {@link EtcdCluster}. */
export interface EtcdMember {
  readonly name: string;
  readonly endpoint: string;
  readonly clientUrl: string;
  /** Pid of the current process (changes after `start()`). */
  readonly pid: number;
  readonly dataDir: string;
  /** Whether a process is running (possibly paused). */
  running(): boolean;
  /** SIGTERM and wait; the data dir stays, so `start()` rejoins as the same member. */
  stop(): Promise<void>;
  /** Starts the member again on its data dir and waits until it is healthy. */
  start(): Promise<void>;
  pause(): void;
  resume(): void;
  kill(): Promise<void>;
}

/** A running etcd cluster. */
export interface EtcdCluster {
  readonly members: readonly EtcdMember[];
  /** Client URLs of all members, for the `etcd3` client's `hosts`. */
  readonly endpoints: readonly string[];
  /** The member that is leader now, asked of each running member; rejects if none knows within `timeoutMs`. */
  leader(timeoutMs?: number): Promise<EtcdMember>;
  /** Stops every member and removes the data dirs. */
  stopAll(): Promise<void>;
  /**
   * `etcdctl snapshot save FILE` from the first running member, as an operator's backup does (plaintext cluster only).
   * Resolves with the snapshot's revision (`etcdctl snapshot status`).
   */
  snapshot(file: string): Promise<{ revision: number }>;
  /**
   * An operator's disaster recovery of the whole cluster (docs/runbook.md, "etcd restored from a snapshot"): kills every
   * member, replaces each data dir with `etcdctl snapshot restore FILE` on the member's name and peer URL, with
   * `clusterToken` (default the current token: then the cluster ID stays the same), and starts them all again on the
   * same ports; resolves once every member is healthy (a leader elected). Later `start()`s use the new token.
   */
  restore(file: string, options?: { clusterToken?: string }): Promise<void>;
}

interface StatusResponse {
  header?: { member_id?: string };
  leader?: string;
}

/** `POST {clientUrl}/v3/maintenance/status` on the gRPC-JSON gateway: `{ memberId, leaderId }`. */
export async function etcdStatus(clientUrl: string, timeoutMs = 1000): Promise<{ memberId: string; leaderId: string }> {
  const res = await fetch(`${clientUrl}/v3/maintenance/status`, {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(timeoutMs),
  });
  const body = (await res.json()) as StatusResponse;
  const memberId = body.header?.member_id;
  const leaderId = body.leader;
  if (typeof memberId !== 'string' || typeof leaderId !== 'string') {
    throw new Error(`unexpected status from ${clientUrl}: ${JSON.stringify(body)}`);
  }
  return { memberId, leaderId };
}

/** Options of {@link startEtcdCluster}. */
export interface StartEtcdClusterOptions {
  /** How long to wait for every member's `/health`; default 20000 ms. */
  readyTimeoutMs?: number;
  /** Client TLS, as {@link StartEtcdOptions.tls} (peers stay plaintext on loopback). */
  tls?: StartEtcdOptions['tls'];
  /** More etcd flags for every member, as {@link StartEtcdOptions.extraArgs}. */
  extraArgs?: readonly string[];
  /** Where the members' data dirs go (`{parentDir}/{member}`, kept on stop); default one temp dir each, removed. */
  parentDir?: string;
}

/**
 * Starts an `n`-member etcd cluster (default 3) on free loopback ports, each with its own temp data dir, and
 * waits until every member is healthy (which needs an elected leader). `leader()` asks the plaintext gateway:
 * not for a TLS cluster.
 */
export async function startEtcdCluster(n = 3, options: StartEtcdClusterOptions = {}): Promise<EtcdCluster> {
  const binary = etcdBinary();
  const readyTimeoutMs = options.readyTimeoutMs ?? 20_000;
  const tls = options.tls;
  const scheme = tls === undefined ? 'http' : 'https';
  const ports: MemberPorts[] = [];
  for (let i = 0; i < n; i++) {
    ports.push({ name: `m${i + 1}`, clientPort: await freePort(), peerPort: await freePort() });
  }
  const initialCluster = ports.map((p) => `${p.name}=http://127.0.0.1:${p.peerPort}`).join(',');
  let token = `idgen-test-${ports[0]?.clientPort ?? 0}`;
  const parentDir = options.parentDir;
  const dirs: TempDir[] = await Promise.all(
    ports.map(async (p): Promise<TempDir> => {
      if (parentDir === undefined) return tempDir(`idgen-etcd-${p.name}`);
      const path = join(parentDir, p.name);
      await mkdir(path, { recursive: true, mode: 0o700 });
      return { path, remove: async () => undefined };
    }),
  );

  const members = ports.map((p, i): EtcdMember & { spawn(): void; wait(): Promise<void> } => {
    const dir = dirs[i] as TempDir;
    const clientUrl = `${scheme}://127.0.0.1:${p.clientPort}`;
    let proc: ProcessHandle | undefined;
    const member = {
      name: p.name,
      endpoint: `127.0.0.1:${p.clientPort}`,
      clientUrl,
      dataDir: dir.path,
      get pid() {
        return proc?.pid ?? -1;
      },
      running: () => proc !== undefined && proc.exitStatus() === undefined,
      spawn() {
        proc = spawnProcess(binary, memberArgs(p, dir.path, initialCluster, token, tls, options.extraArgs));
      },
      async wait() {
        if (proc === undefined) throw new Error(`member ${p.name} not started`);
        await waitHealthy(proc, clientUrl, readyTimeoutMs, `etcd member ${p.name}`, tls);
      },
      async stop() {
        await proc?.stop(5000);
      },
      async start() {
        if (member.running()) return;
        await startAgainHealthy(
          () => (proc = spawnProcess(binary, memberArgs(p, dir.path, initialCluster, token, tls, options.extraArgs))),
          clientUrl,
          readyTimeoutMs,
          `etcd member ${p.name}`,
          tls,
        );
      },
      pause: () => proc?.signal('SIGSTOP'),
      resume: () => proc?.signal('SIGCONT'),
      async kill() {
        await proc?.kill();
      },
    };
    return member;
  });

  let stopped = false;
  const stopAll = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    untrack();
    await Promise.all(members.map((m) => m.stop()));
    await Promise.all(dirs.map((d) => d.remove()));
  };
  const untrack = track({ cleanup: stopAll, cleanupSync: () => undefined });
  try {
    for (const m of members) m.spawn();
    await Promise.all(members.map((m) => m.wait()));
  } catch (e) {
    await stopAll();
    throw e;
  }

  return {
    members,
    endpoints: members.map((m) => m.clientUrl),
    stopAll,
    async snapshot(file) {
      if (tls !== undefined) throw new Error('snapshot() drives a plaintext cluster only');
      const from = members.find((m) => m.running());
      if (from === undefined) throw new Error('snapshot(): no member is running');
      await etcdctlAsync(['--endpoints', from.clientUrl, 'snapshot', 'save', file]);
      const status = JSON.parse(await etcdctlAsync(['snapshot', 'status', file, '--write-out', 'json'])) as {
        revision?: unknown;
      };
      return { revision: Number(status.revision) };
    },
    async restore(file, o = {}) {
      if (stopped) throw new Error('the cluster was stopped; start a new one');
      token = o.clusterToken ?? token;
      // A power cut, then every data dir replaced: SIGTERM'd members would wait for each other up to the 5 s grace.
      await Promise.all(members.map((m) => m.kill()));
      await Promise.all(
        ports.map(async (p, i) => {
          const dataDir = (dirs[i] as TempDir).path;
          await rm(dataDir, { recursive: true, force: true });
          await etcdctlAsync([
            'snapshot',
            'restore',
            file,
            '--name',
            p.name,
            '--data-dir',
            dataDir,
            '--initial-cluster',
            initialCluster,
            '--initial-advertise-peer-urls',
            `http://127.0.0.1:${p.peerPort}`,
            '--initial-cluster-token',
            token,
          ]);
        }),
      );
      // All at once: a member waits for a quorum before it is healthy.
      await Promise.all(members.map((m) => m.start()));
    },
    async leader(timeoutMs = 10_000) {
      const start = Date.now();
      for (;;) {
        for (const m of members) {
          if (!m.running()) continue;
          try {
            const s = await etcdStatus(m.clientUrl, 500);
            if (s.leaderId === '0') continue;
            for (const other of members) {
              if (!other.running()) continue;
              const o = await etcdStatus(other.clientUrl, 500).catch(() => undefined);
              if (o?.memberId === s.leaderId) return other;
            }
          } catch {
            // member paused or not answering: ask the next
          }
        }
        if (Date.now() - start > timeoutMs)
          throw new Error(`no etcd member knows a running leader after ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  };
}

/**
 * Lease settings for tests whose rules are about order, not speed: a 2 s TTL, keep-alives every 400 ms, a 500 ms
 * fence margin, quick retries (the options of @idgen/lease's etcd lease and of @idgen/embedded alike).
 */
export const QUICK_LEASE_SETTINGS = {
  ttlSeconds: 2,
  keepAliveIntervalMs: 400,
  keepAliveTimeoutMs: 300,
  fenceMarginMs: 500,
  requestTimeoutMs: 1500,
  backoff: { initialMs: 50, maxMs: 400 },
} as const;

/**
 * Binds a plaintext test etcd to region `code` under `prefix`, as an operator's `idgen region init` does before a region's
 * first node starts (docs/design.md §5, region binding): `{prefix}/region` = `{"code","clusterId","at"}`, created only if
 * absent, and the lease TTL ceiling `{prefix}/lease-ceiling` (`o.ttlCeilingSeconds`, default 6 s as `region init`;
 * created only if absent: give the longest TTL the test's holders use, as no holder starts on an etcd without one, or
 * with a TTL above it). Rejects when the prefix is bound to another code. Over the gRPC-JSON gateway, so the harness
 * needs no etcd client; a TLS or auth etcd is bound with `idgen region init` (or @idgen/lease's `initRegion`) itself.
 */
export async function bindRegion(
  etcd: { clientUrl: string } | string,
  code: number,
  prefix = '/idgen',
  o: { readonly timeoutMs?: number; readonly ttlCeilingSeconds?: number } = {},
): Promise<void> {
  const timeoutMs = o.timeoutMs ?? 5000;
  const url = typeof etcd === 'string' ? etcd : etcd.clientUrl;
  const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
  const post = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      body: JSON.stringify(body),
      headers: { 'content-type': 'application/json' },
      signal: AbortSignal.timeout(timeoutMs),
    });
    const out = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`etcd ${url}${path}: ${res.status} ${JSON.stringify(out)}`);
    return out;
  };
  const key = `${prefix === '/' ? '' : prefix}/region`;
  const ceilingKey = `${prefix === '/' ? '' : prefix}/lease-ceiling`;
  const ceiling = JSON.stringify({ ttlCeilingSeconds: o.ttlCeilingSeconds ?? 6, at: new Date().toISOString() });
  await post('/v3/kv/txn', {
    compare: [{ key: b64(ceilingKey), target: 'CREATE', result: 'EQUAL', create_revision: '0' }],
    success: [{ request_put: { key: b64(ceilingKey), value: b64(ceiling) } }],
  });
  const probe = (await post('/v3/kv/range', { key: b64(key) })) as { header?: { cluster_id?: string } };
  const clusterId = probe.header?.cluster_id;
  if (typeof clusterId !== 'string') throw new Error(`etcd ${url}: no cluster_id in ${JSON.stringify(probe)}`);
  const value = JSON.stringify({ code, clusterId, at: new Date().toISOString() });
  const res = (await post('/v3/kv/txn', {
    compare: [{ key: b64(key), target: 'CREATE', result: 'EQUAL', create_revision: '0' }],
    success: [{ request_put: { key: b64(key), value: b64(value) } }],
    failure: [{ request_range: { key: b64(key) } }],
  })) as { succeeded?: boolean; responses?: { response_range?: { kvs?: { value?: string }[] } }[] };
  if (res.succeeded === true) return;
  const raw = res.responses?.[0]?.response_range?.kvs?.[0]?.value;
  const existing =
    raw === undefined ? undefined : (JSON.parse(Buffer.from(raw, 'base64').toString('utf8')) as { code?: unknown });
  if (existing?.code !== code) {
    throw new Error(`etcd ${url}: ${key} is bound to region ${String(existing?.code)}, not ${code}`);
  }
}
