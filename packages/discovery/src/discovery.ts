import type { Etcd3, Watcher } from 'etcd3';
import {
  LeaseConfigError,
  createEtcdClient,
  leaseKeys,
  parseServingNode,
  resolveConnection,
  silentLogger,
} from '@idgen/lease';
import type { EtcdConnectionOptions, LeaseLogger, ServingNode } from '@idgen/lease';

/** Races `p` against a timer; the timer is cleared either way. */
function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  p.catch(() => undefined);
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${Math.round(ms)} ms`)), Math.max(0, ms));
    }),
  ]).finally(() => clearTimeout(timer));
}

/** gRPC call options with a deadline `ms` from now (so a stalled etcd cannot hold a call open). */
function deadlineIn(ms: number): { deadline: Date } {
  return { deadline: new Date(Date.now() + Math.max(1, ms)) };
}

function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/** Options of {@link createDiscoveryReader}. */
export interface DiscoveryReaderOptions extends EtcdConnectionOptions {
  /** Region whose serving nodes to list. */
  readonly region: number;
  /** Timeout of one list request; default 5000 ms. */
  readonly requestTimeoutMs?: number;
  readonly logger?: LeaseLogger;
}

/** Lists and watches the serving nodes of one region (`{prefix}/regions/{code}/nodes/`). */
export interface DiscoveryReader {
  /** The serving nodes now, sorted by node id. Unreadable entries are skipped and logged. */
  list(): Promise<ServingNode[]>;
  /**
   * Calls `fn` with the full list at once and after every change. Survives etcd restarts: the list is read
   * again whenever the watch (re)connects. Returns a function that stops watching.
   */
  watch(fn: (nodes: ServingNode[]) => void): () => void;
  close(): Promise<void>;
}

/** Creates a {@link DiscoveryReader}; validates the options before any I/O. */
export function createDiscoveryReader(options: DiscoveryReaderOptions): DiscoveryReader {
  const { endpoints, prefix: rawPrefix } = resolveConnection(options);
  const prefix = rawPrefix === '/' ? '' : rawPrefix;
  if (!Number.isSafeInteger(options.region) || options.region < 0) {
    throw new LeaseConfigError([`region must be a non-negative integer, got ${String(options.region)}`]);
  }
  const logger = options.logger ?? silentLogger;
  const timeout = options.requestTimeoutMs ?? 5000;
  const dir = leaseKeys.nodes(prefix, options.region);
  let client: Etcd3 | undefined = createEtcdClient({
    endpoints,
    tls: options.tls,
    auth: options.auth,
    retryReads: true,
  });
  const watchers = new Set<Watcher>();
  /** Cancels of unsubscribed watches, awaited by close() before the client closes. */
  const cancels = new Set<Promise<unknown>>();

  const list = async (): Promise<ServingNode[]> => {
    if (client === undefined) throw new Error('discovery reader closed');
    const all = await withTimeout(
      client.getAll().prefix(dir).options(deadlineIn(timeout)).strings(),
      timeout,
      'discovery list',
    );
    const nodes: ServingNode[] = [];
    for (const [key, raw] of Object.entries(all)) {
      try {
        nodes.push(parseServingNode(key, raw));
      } catch (e) {
        logger.warn({ key, err: errorText(e) }, 'discovery: skipping an unreadable node record');
      }
    }
    return nodes.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  };

  return {
    list,
    watch(fn) {
      if (client === undefined) throw new Error('discovery reader closed');
      let stopped = false;
      let pending = false;
      let again = false;
      // Re-list rather than patch: a missed event after a reconnect can then never leave a stale entry.
      const refresh = async (): Promise<void> => {
        if (pending) {
          again = true;
          return;
        }
        pending = true;
        try {
          do {
            again = false;
            try {
              const nodes = await list();
              if (!stopped) fn(nodes);
            } catch (e) {
              logger.warn({ err: errorText(e) }, 'discovery: listing nodes failed; the watch will retry on reconnect');
            }
          } while (again && !stopped);
        } finally {
          pending = false;
        }
      };
      // watcher(), not create(): the Watcher exists at once, so close() can always cancel it, even while it is
      // still connecting (one never cancelled keeps etcd3's watch manager reconnecting on timers for ever).
      const watcher: Watcher = client.watch().prefix(dir).watcher();
      watchers.add(watcher);
      watcher.on('connected', () => void refresh());
      watcher.on('put', () => void refresh());
      watcher.on('delete', () => void refresh());
      watcher.on('error', (e) => logger.warn({ err: errorText(e) }, 'discovery: watch error'));
      return () => {
        stopped = true;
        if (watchers.delete(watcher)) cancels.add(watcher.cancel().catch(() => undefined));
      };
    },
    async close() {
      const c = client;
      client = undefined;
      // Every watch cancelled (and those unsubscribed before) before the client closes.
      await Promise.all([...cancels, ...[...watchers].map((w) => w.cancel().catch(() => undefined))]);
      watchers.clear();
      c?.close();
    },
  };
}
