import type { Etcd3, Watcher } from 'etcd3';
import { LeaseConfigError, createEtcdClient, resolveConnection, silentLogger } from '@idgen/lease';
import { leaseKeys, parseServingNode } from '@idgen/lease/records';
import type { EtcdConnectionOptions, LeaseLogger } from '@idgen/lease';
import type { ServingNode } from '@idgen/lease/records';

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
  return new EtcdDiscoveryReader(options);
}

/** A watch's re-list: none in flight, one, one with a change seen meanwhile (one more follows), or unsubscribed. */
type RefreshState = 'idle' | 'listing' | 'listing-again' | 'stopped';

/** The reader: one etcd client, its lists in flight, its watches, and what it last saw of etcd. */
class EtcdDiscoveryReader implements DiscoveryReader {
  private readonly logger: LeaseLogger;
  private readonly timeoutMs: number;
  private readonly closeTimeoutMs: number;
  private readonly where: string;
  private readonly dir: string;
  /** `undefined` once closed. */
  private client: Etcd3 | undefined;
  private readonly watchers = new Set<Watcher>();
  /** Cancels of unsubscribed watches, awaited (within the bound) by close() before the client closes. */
  private readonly cancels = new Map<Watcher, Promise<unknown>>();
  /** gRPC calls of lists in flight, cancelled by close(): a call etcd never answers would hold the process open. */
  private readonly calls = new Set<CancellableCall>();
  private rejectClosed: (e: Error) => void = () => undefined;
  private readonly closed: Promise<never>;
  // Problem state for problem(): the list's and the watches' view of etcd.
  private listedOnce = false;
  private listSince: number | undefined;
  private listError: string | undefined;
  private readonly disconnected = new Map<Watcher, string>();

  constructor(private readonly options: DiscoveryReaderOptions) {
    const { endpoints, prefix: rawPrefix } = resolveConnection(options);
    const prefix = rawPrefix === '/' ? '' : rawPrefix;
    if (!Number.isSafeInteger(options.region) || options.region < 0) {
      throw new LeaseConfigError([`region must be a non-negative integer, got ${String(options.region)}`]);
    }
    this.logger = options.logger ?? silentLogger;
    this.timeoutMs = options.requestTimeoutMs ?? 5000;
    this.closeTimeoutMs = options.closeTimeoutMs ?? 500;
    this.where = `etcd ${endpoints.join(',')}`;
    this.dir = leaseKeys.nodes(prefix, options.region);
    this.client = createEtcdClient({ endpoints, tls: options.tls, auth: options.auth, retryReads: true });
    this.closed = new Promise<never>((_, reject) => {
      this.rejectClosed = reject;
    });
    this.closed.catch(() => undefined);
  }

  async list(): Promise<ServingNode[]> {
    const client = this.client;
    if (client === undefined) throw new Error('discovery reader closed');
    const mine = new Set<CancellableCall>();
    const track = (o: unknown, next: (o: unknown) => CancellableCall): CancellableCall => {
      const call = next(o);
      if (this.client === undefined) {
        // A retry etcd3 starts after close() (`retryReads` takes the CANCELLED of close() as recoverable) holds a
        // connection to a hung etcd, and the process, until the list's deadline (the process exited 4 s after
        // close() over http): cancelled as soon as it has started, as close() cancelled the first attempt.
        setImmediate(() => call.cancelWithStatus(GRPC_CANCELLED, 'discovery reader closed'));
        return call;
      }
      mine.add(call);
      this.calls.add(call);
      return call;
    };
    this.listSince ??= Date.now();
    let all: Record<string, string>;
    try {
      all = await withTimeout(
        client
          .getAll()
          .prefix(this.dir)
          .options({ ...deadlineIn(this.timeoutMs), interceptors: [track as never] })
          .strings(),
        this.timeoutMs,
        'discovery list',
        this.closed,
      );
      this.listedOnce = true;
      this.listError = undefined;
    } catch (e) {
      if (this.client !== undefined) this.listError = errorText(e);
      throw this.client === undefined ? new Error('discovery reader closed') : e;
    } finally {
      this.listSince = undefined;
      for (const c of mine) this.calls.delete(c);
    }
    return this.parse(all);
  }

  /** The readable node records, sorted by node id; an unreadable one is logged and skipped. */
  private parse(all: Record<string, string>): ServingNode[] {
    const nodes: ServingNode[] = [];
    for (const [key, raw] of Object.entries(all)) {
      try {
        nodes.push(parseServingNode(key, raw));
      } catch (e) {
        this.logger.warn({ key, err: errorText(e) }, 'discovery: skipping an unreadable node record');
      }
    }
    return nodes.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  }

  watch(fn: (nodes: ServingNode[]) => void): () => void {
    const client = this.client;
    if (client === undefined) throw new Error('discovery reader closed');
    const refresh = this.refresher(fn);
    // watcher(), not create(): the Watcher exists at once, so close() can always cancel it, even while it is
    // still connecting (one never cancelled keeps etcd3's watch manager reconnecting on timers for ever).
    const watcher: Watcher = client.watch().prefix(this.dir).watcher();
    this.watchers.add(watcher);
    watcher.on('connected', () => {
      this.disconnected.delete(watcher);
      refresh.run();
    });
    watcher.on('disconnected', (e: unknown) => this.disconnected.set(watcher, errorText(e)));
    watcher.on('put', () => refresh.run());
    watcher.on('delete', () => refresh.run());
    watcher.on('error', (e) => this.logger.warn({ err: errorText(e) }, 'discovery: watch error'));
    return () => {
      refresh.stop();
      this.disconnected.delete(watcher);
      if (this.watchers.delete(watcher))
        this.cancels.set(
          watcher,
          watcher.cancel().catch(() => undefined),
        );
    };
  }

  /**
   * Lists again and hands the list to `fn`, one list at a time: a change while one is in flight makes one more after
   * it. Re-list rather than patch: a missed event after a reconnect can then never leave a stale entry.
   */
  private refresher(fn: (nodes: ServingNode[]) => void): { run(): void; stop(): void } {
    let state: RefreshState = 'idle';
    const now = (): RefreshState => state; // read after an await: another call may have moved it
    const loop = async (): Promise<void> => {
      do {
        state = 'listing';
        try {
          const nodes = await this.list();
          if (now() !== 'stopped') fn(nodes);
        } catch (e) {
          this.logger.warn({ err: errorText(e) }, 'discovery: listing nodes failed; the watch will retry on reconnect');
        }
      } while (now() === 'listing-again');
      if (now() === 'listing') state = 'idle';
    };
    return {
      run() {
        if (state === 'idle') void loop();
        else if (state === 'listing') state = 'listing-again';
      },
      stop() {
        state = 'stopped';
      },
    };
  }

  problem(): string | undefined {
    const region = this.options.region;
    if (this.listError !== undefined)
      return `${this.where}: listing region ${region}'s nodes failed: ${this.listError}`;
    if (!this.listedOnce && this.listSince !== undefined) {
      return `${this.where} has not answered the list of region ${region}'s nodes for ${Date.now() - this.listSince} ms`;
    }
    const lost = this.disconnected.values().next();
    return lost.done === true ? undefined : `${this.where}: the node watch lost its connection: ${lost.value}`;
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    this.rejectClosed(new Error('discovery reader closed'));
    for (const call of this.calls) call.cancelWithStatus(GRPC_CANCELLED, 'discovery reader closed');
    this.calls.clear();
    // Every watch cancelled (and those unsubscribed before) before the client closes, each within the bound: a
    // watch etcd does not confirm in time is ended without it.
    for (const w of this.watchers)
      this.cancels.set(
        w,
        w.cancel().catch(() => undefined),
      );
    this.watchers.clear();
    await Promise.all(
      [...this.cancels].map(async ([w, cancel]) => {
        if (!(await settledWithin(cancel, this.closeTimeoutMs))) forceEndWatch(w);
      }),
    );
    this.cancels.clear();
    // A TLS handshake etcd never finishes holds no process open: @idgen/lease's etcd-tls.ts unrefs the socket
    // until the handshake is done, and destroys it after 10 s.
    c?.close();
  }
}
