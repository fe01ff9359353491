/**
 * One chaos node position on the namespace network (issue 25, item 5, `npm run chaos -- --netns`): the node runs in
 * its own network namespace N and reaches etcd only through the router namespace R (netns-fixture.ts), to a relay in
 * a namespace E beside it; a cut is the fixture's `ip rule … blackhole` in R both ways, so the node's packets to etcd
 * and etcd's to the node vanish (no RST, no ICMP: the kernels retransmit and deliver what they queued after the
 * heal). Nothing else of the node is cut: its callers reach it, and the run scrapes it, over Unix sockets.
 *
 *   node (N, 10.231.1.2) ──tcp──> R ──tcp──> relay (E, 10.231.2.2:2379+i) ─unix─> root relay ─> the position's
 *   TCP proxy to etcd member i (node-fleet.ts: so `etcd-slow-*` delays it like every other node)
 *   caller (root) ─> 127.0.0.1:P (root relay, fresh per process) ─unix─> relay (N) ─> node's 127.0.0.1:18080 in N
 *
 * A path-bound Unix socket is one file for every namespace, so the root namespace gets no route, address or
 * interface: nothing the run sends can leave loopback. Needs root and iproute2: {@link createNetnsNodeLink} fails
 * naming what is missing, never falls back to the proxy.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { tempDir, type ProcessHandle, type TempDir } from '@idgen/testing';
import { createNetnsNetwork, NETNS_MISSING_MESSAGE, sweepStaleNamespaces, type NetnsNetwork } from './netns-fixture.js';
import { startRelay, type Relay } from './relay.js';

/** The node's listen and metrics ports inside its namespace (its own loopback: no other process is there). */
const NODE_PORT = 18080;
const METRICS_PORT = 19090;

/** A node process's ways in from the root namespace (fresh TCP ports per process). */
export interface NetnsExposure {
  /** `127.0.0.1:P` in the root namespace: the node's address for the callers and the run. */
  readonly address: string;
  readonly metricsUrl: string;
  /** What the node listens on inside its namespace. */
  readonly listen: string;
  readonly metricsListen: string;
  close(): Promise<void>;
}

export interface NetnsNodeLink {
  /** The node's `--etcd` (the relays in E, one per member). */
  readonly etcd: string;
  /** Starts a process in the node's namespace. */
  spawn(cmd: string, args: readonly string[], env: NodeJS.ProcessEnv, maxLines: number): ProcessHandle;
  /** Root-namespace TCP ports for one node process, relayed to its listen and metrics ports in N. */
  expose(port: () => Promise<number>): Promise<NetnsExposure>;
  /** Silently drops, in the router, every packet between the node and etcd, both ways. */
  cut(): void;
  heal(): void;
  isCut(): boolean;
  /** Kills the relays and the processes started in the namespaces, deletes the namespaces and the socket dir. */
  destroy(): Promise<void>;
}

/** Fails loudly, naming what to install, unless this process can make network namespaces. */
export function assertNetnsAvailable(): void {
  if (typeof process.getuid === 'function' && process.getuid() !== 0)
    throw new Error(`${NETNS_MISSING_MESSAGE}: --netns needs root (uid ${process.getuid()})`);
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore', timeout: 5000 });
  } catch {
    throw new Error(`${NETNS_MISSING_MESSAGE}: no \`ip\` command (install iproute2: apt-get install iproute2)`);
  }
}

/**
 * The namespaces, the relays in E (member i: 10.231.2.2:2379+i → `etcdTargets[i]`) and in N (the node's two ports),
 * ready to start the node. `relayMain` is dist/netns/relay-main.js.
 */
export async function createNetnsNodeLink(o: {
  readonly etcdTargets: readonly string[];
  readonly relayMain: string;
}): Promise<NetnsNodeLink> {
  assertNetnsAvailable();
  const net: NetnsNetwork = createNetnsNetwork(['node', 'etcd']);
  const relays: Relay[] = [];
  let socks: TempDir | undefined;
  // A crash or an interrupt still deletes the namespaces (this process's own, by their names' pid).
  process.once('exit', sweepStaleNamespaces);
  const destroy = async (): Promise<void> => {
    await Promise.all(relays.map((r) => r.close().catch(() => undefined)));
    await net.destroy();
    process.off('exit', sweepStaleNamespaces);
    await socks?.remove();
  };
  try {
    // Short paths: a Unix socket path has at most 107 bytes.
    socks = await tempDir('idgnns');
    const dir = socks.path;
    const e = net.member('etcd');
    const pairs: string[] = [];
    const urls: string[] = [];
    for (const [i, target] of o.etcdTargets.entries()) {
      const sock = join(dir, `e${i}.sock`);
      const [host, port] = splitHostPort(target);
      relays.push(await startRelay({ unix: sock }, { host, port }));
      pairs.push(`tcp:${e.address}:${2379 + i}`, `unix:${sock}`);
      urls.push(`http://${e.address}:${2379 + i}`);
    }
    const agentE = e.spawn(process.execPath, [o.relayMain, ...pairs]);
    const agentN = net
      .member('node')
      .spawn(process.execPath, [
        o.relayMain,
        `unix:${join(dir, 'http.sock')}`,
        `tcp:127.0.0.1:${NODE_PORT}`,
        `unix:${join(dir, 'metrics.sock')}`,
        `tcp:127.0.0.1:${METRICS_PORT}`,
      ]);
    await Promise.all([agentE.waitForLine(/relay ready/, 15_000), agentN.waitForLine(/relay ready/, 15_000)]);
    const n = net.member('node');
    return {
      etcd: urls.join(','),
      spawn: (cmd, args, env, maxLines) => n.spawn(cmd, args, env, maxLines),
      async expose(port) {
        const p = await port();
        const m = await port();
        const http = await startRelay({ host: '127.0.0.1', port: p }, { unix: join(dir, 'http.sock') });
        const metrics = await startRelay({ host: '127.0.0.1', port: m }, { unix: join(dir, 'metrics.sock') });
        relays.push(http, metrics);
        return {
          address: `127.0.0.1:${p}`,
          metricsUrl: `http://127.0.0.1:${m}/metrics`,
          listen: `127.0.0.1:${NODE_PORT}`,
          metricsListen: `127.0.0.1:${METRICS_PORT}`,
          close: async () => {
            await Promise.all([http.close(), metrics.close()]);
          },
        };
      },
      cut: () => net.cut('node'),
      heal: () => net.heal('node'),
      isCut: () => net.isCut('node'),
      destroy,
    };
  } catch (err) {
    await destroy();
    throw err;
  }
}

function splitHostPort(hostPort: string): [string, number] {
  const i = hostPort.lastIndexOf(':');
  return [hostPort.slice(0, i), Number(hostPort.slice(i + 1))];
}
