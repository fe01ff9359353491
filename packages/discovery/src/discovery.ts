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

/** Races `p` against a timer and `stop` (close); the timer is cleared either way. */
function withTimeout<T>(p: Promise<T>, ms: number, what: string, stop: Promise<never>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  p.catch(() => undefined);
  return Promise.race([
    p,
    stop,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${Math.round(ms)} ms`)), Math.max(0, ms));
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Resolves when `p` settles or after `ms`, whichever is first (`true`: `p` settled); the timer is cleared. */
async function settledWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = p.then(
    () => true,
    () => true,
  );
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  return Promise.race([settled, late]).finally(() => clearTimeout(timer));
}

/** A gRPC call as an interceptor sees it: enough to cancel it (grpc-js `InterceptingCallInterface`). */
interface CancellableCall {
  cancelWithStatus(status: number, details: string): void;
}

/** grpc's CANCELLED status code. */
const GRPC_CANCELLED = 1;

/**
 * Ends a watch whose cancel got no answer from etcd before close()'s bound (a paused etcd, a TLS handshake that
 * never finishes): etcd3 1.1.2 waits for etcd's reply for ever and keeps the stream open and, with the watcher still
 * attached, reconnects on timers for ever, so the process could never exit (the
 * project's rule: every close() ends). Reaches into its watch manager (`watchers`, `expectedClosers`, `stream`):
 * checked shapes only, a no-op on any other version.
 */
function forceEndWatch(watcher: Watcher): void {
  const manager = (watcher as unknown as { manager?: unknown }).manager as
    { watchers?: unknown; expectedClosers?: unknown; stream?: unknown } | undefined;
  if (manager === undefined || !Array.isArray(manager.watchers)) return;
  manager.watchers = (manager.watchers as unknown[]).filter((w) => w !== watcher);
  if (manager.expectedClosers instanceof Set) manager.expectedClosers.delete(watcher);
  const stream = manager.stream as { cancel?: () => void } | undefined;
  if ((manager.watchers as unknown[]).length === 0 && typeof stream?.cancel === 'function') {
    try {
      stream.cancel();
    } catch {
      // Already ended: nothing left to stop.
    }
  }
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
  /**
   * Longest wait of `close()` for etcd to confirm each watch's cancel; default 500 ms. Past it the watch is ended
   * without etcd (a paused or silent etcd never answers), so `close()` always resolves and the process can exit.
   */
  readonly closeTimeoutMs?: number;
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
  /**
   * What is wrong with etcd, as this reader last saw it, or `undefined` while it answers: the last list failed, the
   * first list has not been answered yet, or a watch lost its connection. `@idgen/client` adds it to an
   * `IdsUnavailableError`, so an outage caused by etcd names etcd.
   */
  problem(): string | undefined;
  /**
   * Stops every watch and closes the etcd connection. Resolves within `closeTimeoutMs` (and a few ms) whatever etcd
   * does; calls still waiting on etcd reject with "discovery reader closed". Idempotent.
   */
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
  const closeTimeout = options.closeTimeoutMs ?? 500;
  const where = `etcd ${endpoints.join(',')}`;
  const dir = leaseKeys.nodes(prefix, options.region);
  let client: Etcd3 | undefined = createEtcdClient({
    endpoints,
    tls: options.tls,
    auth: options.auth,
    retryReads: true,
  });
  const watchers = new Set<Watcher>();
  /** Cancels of unsubscribed watches, awaited (within the bound) by close() before the client closes. */
  const cancels = new Map<Watcher, Promise<unknown>>();
  /** gRPC calls of lists in flight, cancelled by close(): a call etcd never answers would hold the process open. */
  const calls = new Set<CancellableCall>();
  let rejectClosed: (e: Error) => void = () => undefined;
  const closed = new Promise<never>((_, reject) => {
    rejectClosed = reject;
  });
  closed.catch(() => undefined);
  // Problem state for problem(): the list's and the watches' view of etcd.
  let listedOnce = false;
  let listSince: number | undefined;
  let listError: string | undefined;
  const disconnected = new Map<Watcher, string>();

  const list = async (): Promise<ServingNode[]> => {
    if (client === undefined) throw new Error('discovery reader closed');
    const mine = new Set<CancellableCall>();
    const track = (o: unknown, next: (o: unknown) => CancellableCall): CancellableCall => {
      const call = next(o);
      if (client === undefined) {
        // A retry etcd3 starts after close() (`retryReads` takes the CANCELLED of close() as recoverable) holds a
        // connection to a hung etcd, and the process, until the list's deadline (the process exited 4 s after
        // close() over http): cancelled as soon as it has started, as close() cancelled the first attempt.
        setImmediate(() => call.cancelWithStatus(GRPC_CANCELLED, 'discovery reader closed'));
        return call;
      }
      mine.add(call);
      calls.add(call);
      return call;
    };
    listSince ??= Date.now();
    let all: Record<string, string>;
    try {
      all = await withTimeout(
        client
          .getAll()
          .prefix(dir)
          .options({ ...deadlineIn(timeout), interceptors: [track as never] })
          .strings(),
        timeout,
        'discovery list',
        closed,
      );
      listedOnce = true;
      listError = undefined;
    } catch (e) {
      if (client !== undefined) listError = errorText(e);
      throw client === undefined ? new Error('discovery reader closed') : e;
    } finally {
      listSince = undefined;
      for (const c of mine) calls.delete(c);
    }
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
      watcher.on('connected', () => {
        disconnected.delete(watcher);
        void refresh();
      });
      watcher.on('disconnected', (e: unknown) => disconnected.set(watcher, errorText(e)));
      watcher.on('put', () => void refresh());
      watcher.on('delete', () => void refresh());
      watcher.on('error', (e) => logger.warn({ err: errorText(e) }, 'discovery: watch error'));
      return () => {
        stopped = true;
        disconnected.delete(watcher);
        if (watchers.delete(watcher))
          cancels.set(
            watcher,
            watcher.cancel().catch(() => undefined),
          );
      };
    },
    problem() {
      if (listError !== undefined) return `${where}: listing region ${options.region}'s nodes failed: ${listError}`;
      if (!listedOnce && listSince !== undefined) {
        return `${where} has not answered the list of region ${options.region}'s nodes for ${Date.now() - listSince} ms`;
      }
      const lost = disconnected.values().next();
      return lost.done === true ? undefined : `${where}: the node watch lost its connection: ${lost.value}`;
    },
    async close() {
      const c = client;
      client = undefined;
      rejectClosed(new Error('discovery reader closed'));
      for (const call of calls) call.cancelWithStatus(GRPC_CANCELLED, 'discovery reader closed');
      calls.clear();
      // Every watch cancelled (and those unsubscribed before) before the client closes, each within the bound: a
      // watch etcd does not confirm in time is ended without it.
      for (const w of watchers)
        cancels.set(
          w,
          w.cancel().catch(() => undefined),
        );
      watchers.clear();
      await Promise.all(
        [...cancels].map(async ([w, cancel]) => {
          if (!(await settledWithin(cancel, closeTimeout))) forceEndWatch(w);
        }),
      );
      cancels.clear();
      // A TLS handshake etcd never finishes holds no process open: @idgen/lease's etcd-tls.ts unrefs the socket
      // until the handshake is done, and destroys it after 10 s.
      c?.close();
    },
  };
}
