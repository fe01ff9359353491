import { metrics } from '@opentelemetry/api';
import { Code, ConnectError } from '@connectrpc/connect';
import {
  DEFAULT_LAYOUT,
  MAX_ID,
  MAX_NEXT_IDS,
  createIdForms,
  type CallOptions,
  type FormCallOptions,
  type IdForm,
  type IdForms,
  type IdInForm,
} from '@idgen/core';
import { BlockGuard } from './block-guard.js';
import { systemClientClock, type ClientClock } from './clock.js';
import { createConnectTransport } from './connect-transport.js';
import { dns, isDnsTarget, type DnsDiscovery } from './dns-discovery.js';
import { IdClientError, IdsUnavailableError, type AttemptFailure } from './errors.js';
import { HedgePolicy } from './hedge.js';
import { IdBuffer, type IdBlock } from './id-buffer.js';
import { refuseUnknownClientOptions } from './options-check.js';
import {
  CLIENT_METRIC_ATTRIBUTES,
  createClientInstruments,
  type ClientCounters,
  type ClientInstruments,
} from './metrics.js';
import {
  NodeGroup,
  recordLatency,
  toBaseUrl,
  type DiscoveredNode,
  type NodeDiscovery,
  type NodeState,
} from './node-pool.js';
import { classifyFailure, type ClassifiedFailure, type IdTransport, type IdTransportFactory } from './transport.js';
import { CLIENT_DEFAULTS } from './defaults.js';

import type { IdClientOptions } from './options.js';

export type { IdClientOptions, RegionNodes } from './options.js';

/** Options of one call: the contract every ID source shares (`@idgen/core`). */
export type { CallOptions } from '@idgen/core';

/** A node as {@link IdClient.stats} reports it. */
export interface NodeStats {
  readonly url: string;
  readonly region: number;
  readonly healthy: boolean;
  readonly failures: number;
  readonly lastFailure: AttemptFailure | undefined;
}

/** Counters and state of one client (the metrics, readable without an SDK). */
export interface IdClientStats extends Readonly<ClientCounters> {
  /** IDs in the buffer now (including any not yet noticed to have expired). */
  readonly buffered: number;
  /** Calls waiting for a refill. */
  readonly waiting: number;
  /** `NextIds` requests that succeeded. */
  readonly refills: number;
  readonly nodes: readonly NodeStats[];
}

/** The buffered ID client (docs/design.md §7). */
export interface IdClient {
  /**
   * One new ID in a form (docs/design.md §1 "Forms"): `base32` and `decimal` as sortable text, `spread` and `keyed`
   * as a bigint. An unknown form, or `keyed` without the client's `keyedFormKey`, rejects with `TypeError` and takes
   * no ID.
   */
  nextId<F extends IdForm>(options: FormCallOptions<F>): Promise<IdInForm<F>>;
  /** One new ID: from the buffer when it has one (no network hop), else after a refill. */
  nextId(options?: CallOptions): Promise<bigint>;
  /** `count` new IDs in a form, as {@link nextId} with `form`. */
  nextIds<F extends IdForm>(count: number, options: FormCallOptions<F>): Promise<IdInForm<F>[]>;
  /** `count` new IDs (1 … 65,536), in the order handed out. */
  nextIds(count: number, options?: CallOptions): Promise<bigint[]>;
  /** One new ID as a decimal string, for JSON and logs (a `number` would lose precision above 2^53). */
  nextIdString(options?: CallOptions): Promise<string>;
  /** An ID from the buffer if it holds one, else `undefined` (and a refill starts); never waits. */
  tryNextId(): bigint | undefined;
  stats(): IdClientStats;
  /** Stops refills, rejects waiting calls with code `closed`, closes connections. Idempotent. */
  close(): Promise<void>;
}

/** Largest `nextIds` count, the same for every ID source (`@idgen/core`). */
export { MAX_NEXT_IDS } from '@idgen/core';

/**
 * Ceiling of `bufferSize` and `maxBatch`: the servers' largest `--max-count`. A bigger buffer only pulls IDs
 * from the region to discard them (`bufferSize: 1_000_000` took 1,007,616 IDs for two calls).
 */
export const MAX_BUFFER_SIZE = 65_536;

/** Longest duration option: what `setTimeout` can wait (a longer delay fires at once). */
const MAX_DURATION_MS = 2_147_483_647;

/** How many of the most recent failed attempts an {@link IdsUnavailableError} reports. */
const FAILURES_KEPT = 16;

interface Waiter {
  /** IDs still wanted. */
  need: number;
  readonly count: number;
  /** Collected so far (only for `nextIds`). */
  ids: bigint[] | undefined;
  oldestArrivalMs: number;
  readonly startedMs: number;
  settled: boolean;
  resolve(value: bigint | bigint[]): void;
  reject(e: unknown): void;
  cleanup(): void;
}

type RoundOutcome =
  | { kind: 'ok'; blocks: readonly IdBlock[]; arrivalMs: number }
  | { kind: 'rejected'; error: IdClientError }
  | { kind: 'failed' }
  | { kind: 'closed' };

type AttemptOutcome =
  | { kind: 'ok'; blocks: readonly IdBlock[]; arrivalMs: number }
  | { kind: 'rejected'; error: IdClientError }
  | { kind: 'failed' }
  /** Answered after the round had its winner (or had ended): thrown away, never checked or handed out. */
  | { kind: 'discarded' };

/** One refill's walk over the nodes, with at most two attempts in flight (one hedge). */
interface Round {
  /** Nodes already asked in this round (never asked twice). */
  readonly tried: Set<NodeState>;
  /** The region the walk is in (home first, then the fallbacks in order). */
  regionIndex: number;
  /** The region whose discovery the walk has waited for (once per region). */
  readyWaited: number;
  /**
   * Set, in the same tick, when an answer passed the block checks, and when the round ends: every later
   * answer is discarded, so exactly one response per round reaches the guard's memory and the buffer.
   */
  settled: boolean;
}

/** An attempt as the client tracks it until it ends, whether or not its round still waits for it. */
interface RunningEntry {
  readonly node: NodeState;
  readonly round: Round;
  readonly settled: Promise<AttemptOutcome>;
}

/** An attempt of a round, and how it ended once `done` resolves. */
interface RunningAttempt {
  readonly node: NodeState;
  readonly regionIndex: number;
  readonly startedMs: number;
  /** Sent as a hedge (a second node for the same refill). */
  readonly hedge: boolean;
  /** Whether this attempt has had its one hedge chance. */
  hedged: boolean;
  outcome: AttemptOutcome | undefined;
  done: Promise<RunningAttempt>;
}
interface RegionGroup {
  readonly group: NodeGroup;
  ready: Promise<void>;
  /** Set once `ready` has resolved: static regions are ready from the start. */
  isReady: boolean;
  unwatch: (() => void) | undefined;
  /** Where the nodes come from, when not a static list (its `problem()` goes into errors). */
  discovery: NodeDiscovery | undefined;
  /** A discovery the client made itself (a `dns:` target in `nodes`): closed with the client. */
  owned: DnsDiscovery | undefined;
}

/**
 * Creates the client. It fills its buffer in the background at once (unless `prefill: false`).
 *
 * Guarantees: an ID is handed out at most once per client, never older than `maxAgeMs` since it
 * arrived, and never invented: when no node of any configured region answers before a call's deadline
 * the call rejects with {@link IdsUnavailableError}.
 */
export function createIdClient(options: IdClientOptions): IdClient {
  return new BufferedIdClient(options);
}

class BufferedIdClient implements IdClient {
  private readonly clock: ClientClock;
  private readonly buffer: IdBuffer;
  private readonly bufferSize: number;
  private readonly lowWater: number;
  private readonly maxAgeMs: number;
  private readonly maxBatch: number;
  private readonly deadlineMs: number;
  private readonly attemptTimeoutMs: number;
  private readonly transportFactory: IdTransportFactory;
  private readonly regions: RegionGroup[];
  private readonly counters: ClientCounters = {
    hits: 0,
    misses: 0,
    discarded: 0,
    retries: 0,
    failovers: 0,
    refusedForeignRegion: 0,
    refusedReplayed: 0,
    hedgesSent: 0,
    hedgesWon: 0,
    hedgeBlocksDiscarded: 0,
  };
  private readonly hedge: HedgePolicy | undefined;
  private readonly guard: BlockGuard;
  private readonly forms: IdForms;
  private readonly instruments: ClientInstruments;
  private readonly recentFailures: AttemptFailure[] = [];

  private waiters: Waiter[] = [];
  private waiterHead = 0;
  /** IDs owed to live waiters. */
  private owed = 0;
  private liveWaiters = 0;
  /** The refill loop's promise (awaited by close) and whether it is still running. */
  private refilling: Promise<void> | undefined;
  private refillRunning = false;
  /** Every attempt running, a round's loser included (close aborts them all and waits for them). */
  private readonly attempts = new Map<AbortController, RunningEntry>();
  private wake: (() => void) | undefined;
  private closed = false;
  private refills = 0;

  // Demand estimate, so a refill is sized to the demand the client sees: IDs asked for per ms, smoothed.
  private demanded = 0;
  private demandSampleMs: number | undefined;
  private demandSampleCount = 0;
  private ratePerMs = 0;
  private capacity: number;
  private lowWaterNow: number;

  constructor(options: IdClientOptions) {
    refuseUnknownClientOptions(options);
    this.clock = options.clock ?? systemClientClock;
    const layout = options.layout ?? DEFAULT_LAYOUT;
    // Every option has a range and the message names it (nothing out of range is taken silently).
    this.bufferSize = integerIn('bufferSize', options.bufferSize ?? CLIENT_DEFAULTS.bufferSize, 1, MAX_BUFFER_SIZE);
    this.lowWater = integerIn('lowWater', options.lowWater ?? Math.floor(this.bufferSize / 2), 0, this.bufferSize - 1);
    this.maxAgeMs = durationMs('maxAgeMs', options.maxAgeMs ?? CLIENT_DEFAULTS.maxAgeMs);
    this.maxBatch = integerIn('maxBatch', options.maxBatch ?? CLIENT_DEFAULTS.maxBatch, 1, MAX_BUFFER_SIZE);
    this.deadlineMs = durationMs('deadlineMs', options.deadlineMs ?? CLIENT_DEFAULTS.deadlineMs);
    this.attemptTimeoutMs = durationMs(
      'attemptTimeoutMs',
      options.attemptTimeoutMs ?? CLIENT_DEFAULTS.attemptTimeoutMs,
    );
    this.hedge = HedgePolicy.from(options.hedge, this.attemptTimeoutMs);
    if (options.backoff?.initialMs !== undefined) durationMs('backoff.initialMs', options.backoff.initialMs);
    if (options.backoff?.maxMs !== undefined) durationMs('backoff.maxMs', options.backoff.maxMs);
    this.buffer = new IdBuffer(this.maxAgeMs);
    this.capacity = this.bufferSize;
    this.lowWaterNow = this.lowWater;
    const tls = options.tls !== undefined;
    this.transportFactory =
      options.transport ??
      ((target) =>
        createConnectTransport(target, { protocol: options.protocol, tls: options.tls, keepAlive: options.keepAlive }));
    const random = options.random ?? Math.random;
    const seen = new Set<number>();
    this.regions = [options, ...(options.fallbackRegions ?? [])].map((r, i) => {
      const what = i === 0 ? 'the home region' : `fallback region ${r.region}`;
      integerIn(
        i === 0 ? 'region' : 'fallbackRegions[].region',
        r.region,
        0,
        layout.maxRegion,
        ` (the layout's ${layout.regionBits} region bits)`,
      );
      if (seen.has(r.region))
        throw new RangeError(`region ${r.region} is listed twice (home and fallbacks must differ)`);
      seen.add(r.region);
      const group = new NodeGroup(r.region, options.backoff ?? {}, random, (node) => this.closeTransport(node));
      if ((r.nodes === undefined) === (r.discovery === undefined)) {
        throw new TypeError(`${what} needs exactly one of \`nodes\` (a static list) or \`discovery\``);
      }
      if (r.nodes !== undefined) {
        if (r.nodes.length === 0) throw new RangeError(`${what}: \`nodes\` is empty`);
        const target = r.nodes.find((a) => isDnsTarget(a));
        if (target !== undefined) {
          if (r.nodes.length !== 1)
            throw new RangeError(
              `${what}: a \`dns:\` target must be the only entry of \`nodes\`, got ${r.nodes.length}`,
            );
          const owned = dns(target);
          const region = this.watchDiscovery(group, owned, tls);
          region.owned = owned;
          return region;
        }
        group.setUrls(r.nodes.map((a) => toBaseUrl(a, tls)));
        return {
          group,
          ready: Promise.resolve(),
          isReady: true,
          unwatch: undefined,
          discovery: undefined,
          owned: undefined,
        };
      }
      return this.watchDiscovery(group, r.discovery as NodeDiscovery, tls);
    });
    this.guard = new BlockGuard(layout, seen, options.region);
    this.forms = createIdForms({ layout, key: options.keyedFormKey });
    this.instruments = createClientInstruments(options.meter ?? metrics.getMeter('@idgen/client'), this.counters);
    if (options.prefill ?? true) this.kick();
  }

  nextId<F extends IdForm>(options: FormCallOptions<F>): Promise<IdInForm<F>>;
  nextId(options?: CallOptions): Promise<bigint>;
  nextId(options?: CallOptions | FormCallOptions): Promise<bigint | string> {
    return this.forms.nextInForm(options, () => this.nextPlainId(options));
  }

  private nextPlainId(options: CallOptions | undefined): Promise<bigint> {
    if (this.closed) return Promise.reject(closedError());
    const id = this.takeBuffered();
    if (id !== undefined) return Promise.resolve(id);
    return this.enqueue(1, options) as Promise<bigint>;
  }

  /** The buffer path of one ID: an ID when no call is waiting ahead and the buffer holds one. */
  private takeBuffered(): bigint | undefined {
    if (this.liveWaiters !== 0) return undefined;
    this.expire(this.clock.monoMs());
    const id = this.buffer.take();
    if (id !== undefined) {
      this.counters.hits++;
      this.demanded++;
      if (this.buffer.available < this.lowWaterNow) this.kick();
    }
    return id;
  }

  nextIds<F extends IdForm>(count: number, options: FormCallOptions<F>): Promise<IdInForm<F>[]>;
  nextIds(count: number, options?: CallOptions): Promise<bigint[]>;
  nextIds(count: number, options?: CallOptions | FormCallOptions): Promise<(bigint | string)[]> {
    return this.forms.manyInForm(options, () => this.nextPlainIds(count, options));
  }

  private nextPlainIds(count: number, options: CallOptions | undefined): Promise<bigint[]> {
    if (!Number.isInteger(count) || count < 1 || count > MAX_NEXT_IDS) {
      return Promise.reject(
        new RangeError(`nextIds(count): count must be an integer from 1 to ${MAX_NEXT_IDS}, got ${String(count)}`),
      );
    }
    if (this.closed) return Promise.reject(closedError());
    if (this.liveWaiters === 0) {
      this.expire(this.clock.monoMs());
      if (this.buffer.available >= count) {
        const ids: bigint[] = new Array<bigint>(count);
        for (let i = 0; i < count; i++) ids[i] = this.buffer.take() as bigint;
        this.counters.hits += count;
        this.demanded += count;
        if (this.buffer.available < this.lowWaterNow) this.kick();
        return Promise.resolve(ids);
      }
    }
    return this.enqueue(count, options) as Promise<bigint[]>;
  }

  nextIdString(options?: CallOptions): Promise<string> {
    return this.nextId(options).then((id) => id.toString());
  }

  tryNextId(): bigint | undefined {
    if (this.closed) return undefined;
    const id = this.takeBuffered();
    if (id !== undefined) return id;
    this.counters.misses++;
    this.demanded++;
    this.kick();
    return undefined;
  }

  stats(): IdClientStats {
    const now = this.clock.monoMs();
    return {
      ...this.counters,
      buffered: this.buffer.available,
      waiting: this.liveWaiters,
      refills: this.refills,
      nodes: this.regions.flatMap((r) =>
        r.group.list().map((n) => ({
          url: n.url,
          region: n.region,
          healthy: n.unhealthyUntilMs <= now,
          failures: n.failures,
          lastFailure: n.lastFailure,
        })),
      ),
    };
  }

  async close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      const error = closedError();
      for (let i = this.waiterHead; i < this.waiters.length; i++) this.settle(this.waiters[i] as Waiter, error, true);
      this.waiters = [];
      this.waiterHead = 0;
      for (const controller of this.attempts.keys()) controller.abort(error);
      this.wake?.();
      for (const r of this.regions) {
        r.unwatch?.();
        r.owned?.close();
        r.group.closeAll();
      }
      this.buffer.clear();
      this.instruments.close();
    }
    await this.refilling;
    // A round's loser may still run: aborted above, it ends at once (or by its attempt timeout).
    await Promise.all([...this.attempts.values()].map((a) => a.settled));
  }

  // ---- waiting callers ---------------------------------------------------------------------------

  private enqueue(count: number, options: CallOptions | undefined): Promise<bigint | bigint[]> {
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const deadlineMs = options?.deadlineMs ?? this.deadlineMs;
    if (!(deadlineMs > 0))
      return Promise.reject(new RangeError(`deadlineMs must be above 0, got ${String(deadlineMs)}`));
    this.counters.misses++;
    this.demanded += count;
    return new Promise<bigint | bigint[]>((resolve, reject) => {
      const startedMs = this.clock.monoMs();
      const waiter: Waiter = {
        need: count,
        count,
        ids: count === 1 ? undefined : [],
        oldestArrivalMs: Infinity,
        startedMs,
        settled: false,
        resolve,
        reject,
        cleanup: () => undefined,
      };
      const cancelTimer = this.clock.schedule(
        () => this.settle(waiter, this.unavailableError(waiter), true),
        deadlineMs,
      );
      const onAbort = (): void => this.settle(waiter, signal?.reason, true);
      signal?.addEventListener('abort', onAbort, { once: true });
      waiter.cleanup = () => {
        cancelTimer();
        signal?.removeEventListener('abort', onAbort);
      };
      this.waiters.push(waiter);
      this.liveWaiters++;
      this.owed += count;
      // nextIds(n) takes what the buffer holds now and waits for the rest.
      if (this.buffer.available > 0) this.serveWaiters(startedMs);
      this.kick();
    });
  }

  /** Settles a waiter once: with its IDs (`error` undefined) or with `error`. */
  private settle(w: Waiter, error: unknown, rejecting = error !== undefined): void {
    if (w.settled) return;
    w.settled = true;
    w.cleanup();
    this.liveWaiters--;
    this.owed -= w.need;
    if (w.ids !== undefined && rejecting && w.ids.length > 0) {
      // IDs already taken for a call that gave up are never handed to anyone else: drop them.
      this.counters.discarded += w.ids.length;
    }
    if (rejecting) w.reject(error);
  }

  /** Hands buffered IDs to the waiters, oldest call first (waiters exist only while the buffer is empty). */
  private serveWaiters(nowMs: number): void {
    this.expire(nowMs);
    while (this.waiterHead < this.waiters.length && this.buffer.available > 0) {
      const w = this.waiters[this.waiterHead] as Waiter;
      if (w.settled) {
        this.waiterHead++;
        continue;
      }
      if (w.ids === undefined) {
        const id = this.buffer.take() as bigint;
        this.settle(w, undefined);
        this.waiterHead++;
        w.resolve(id);
        continue;
      }
      const arrival = this.buffer.oldestArrivalMs() ?? nowMs;
      if (arrival < w.oldestArrivalMs) w.oldestArrivalMs = arrival;
      while (w.need > 0) {
        const id = this.buffer.take();
        if (id === undefined) break;
        w.ids.push(id);
        w.need--;
        this.owed--;
      }
      if (w.need > 0) break;
      if (nowMs - w.oldestArrivalMs >= this.maxAgeMs) {
        // Collected across refills for longer than maxAgeMs: too old to hand out (docs/design.md §3).
        this.counters.discarded += w.ids.length;
        w.ids = [];
        w.need = w.count;
        this.owed += w.count;
        w.oldestArrivalMs = Infinity;
        continue;
      }
      const ids = w.ids;
      this.settle(w, undefined);
      this.waiterHead++;
      w.resolve(ids);
    }
    if (this.waiterHead === this.waiters.length) {
      this.waiters = [];
      this.waiterHead = 0;
    } else if (this.waiterHead > 1024 && this.waiterHead * 2 > this.waiters.length) {
      this.waiters = this.waiters.slice(this.waiterHead);
      this.waiterHead = 0;
    }
  }

  private unavailableError(w: Waiter): IdsUnavailableError {
    const waitedMs = Math.round(this.clock.monoMs() - w.startedMs);
    const regions = this.regions.map((r) => {
      // Discovery's own trouble (etcd not answering) is the likelier cause: say so, or the
      // caller blames the nodes.
      const problem = discoveryProblem(r.discovery);
      const why = problem === undefined ? '' : `; discovery: ${problem}`;
      const nodes = r.group.list();
      if (nodes.length === 0) return `region ${r.group.region}: no nodes known${why}`;
      const failed = nodes.filter((n) => n.lastFailure !== undefined && n.failures > 0);
      const last = failed.map((n) => `${n.url} ${n.lastFailure?.code}`).join(', ');
      return `region ${r.group.region}: ${failed.length}/${nodes.length} nodes failing${last ? ` (${last})` : ''}${why}`;
    });
    // A refused answer says more than its code: name the node and the region it served, so
    // the operator knows where to look.
    const refused = [...this.recentFailures]
      .reverse()
      .find((f) => f.code === 'foreign_region' || f.code === 'replayed_block');
    // Else the last attempt's own words: a code alone (`canceled`, `internal`, `unavailable`) hides the cause, such
    // as a TLS alert or a certificate for another name, which connect-es puts in the message.
    const last = this.recentFailures[this.recentFailures.length - 1];
    const cause =
      refused !== undefined
        ? `; ${refused.message}`
        : last === undefined
          ? ''
          : `; last attempt: ${last.node} ${last.code}: ${last.message}`;
    return new IdsUnavailableError(
      `no IDs within ${waitedMs} ms: the buffer is empty and no node answered; ${regions.join('; ')}${cause}`,
      { attempts: [...this.recentFailures], waitedMs },
    );
  }

  // ---- refills -----------------------------------------------------------------------------------

  private expire(nowMs: number): void {
    const dropped = this.buffer.expire(nowMs);
    if (dropped > 0) this.counters.discarded += dropped;
  }

  /** Starts the refill loop unless it runs already: one request in flight at a time (docs/design.md §7). */
  private kick(): void {
    if (this.refillRunning || this.closed) return;
    this.refillRunning = true;
    this.refilling = this.refillLoop().catch((e: unknown) => this.failAll(IdClientError.from(e)));
  }

  private async refillLoop(): Promise<void> {
    try {
      // Let the caller that kicked finish its synchronous work (queueing more waiters) first.
      await Promise.resolve();
      while (!this.closed) {
        this.expire(this.clock.monoMs());
        if (this.liveWaiters === 0 && this.buffer.available >= this.lowWaterNow) return;
        const outcome = await this.fetchRound(this.requestSize());
        if (outcome.kind === 'closed' || this.closed) return;
        if (outcome.kind === 'ok') {
          this.refills++;
          this.buffer.push(outcome.blocks, outcome.arrivalMs);
          this.serveWaiters(this.clock.monoMs());
          continue;
        }
        if (outcome.kind === 'rejected') {
          this.failAll(outcome.error);
          return;
        }
        // Every node of every usable region failed or is backing off. Without waiters this was a
        // background refill: stop, the next take starts another. With waiters, keep trying until their
        // deadlines, which reject them: the client never invents an ID.
        if (this.liveWaiters === 0) return;
        await this.sleepUntilRetry();
      }
    } finally {
      // Cleared in the same tick as the loop's last look at the waiters (no await in between): a call
      // queued after that look starts a new loop rather than wait on one that has decided to stop.
      this.refillRunning = false;
    }
  }

  private failAll(error: IdClientError): void {
    for (let i = this.waiterHead; i < this.waiters.length; i++) this.settle(this.waiters[i] as Waiter, error, true);
    this.waiters = [];
    this.waiterHead = 0;
  }

  /**
   * How many IDs to ask for: enough to bring the buffer back to its capacity and serve the waiters.
   * The capacity is `bufferSize`, or a quarter of `maxAgeMs` worth of the observed demand when that is
   * more (at most `maxBatch`), so a busy client refills a few times per `maxAgeMs` and its IDs are
   * used long before they expire.
   */
  private requestSize(): number {
    const now = this.clock.monoMs();
    if (this.demandSampleMs === undefined) {
      this.demandSampleMs = now;
      this.demandSampleCount = this.demanded;
    } else if (now - this.demandSampleMs >= 10) {
      const rate = (this.demanded - this.demandSampleCount) / (now - this.demandSampleMs);
      this.ratePerMs = this.ratePerMs === 0 ? rate : 0.5 * this.ratePerMs + 0.5 * rate;
      this.demandSampleMs = now;
      this.demandSampleCount = this.demanded;
    }
    const top = Math.max(this.bufferSize, this.maxBatch);
    this.capacity = Math.min(top, Math.max(this.bufferSize, Math.ceil((this.ratePerMs * this.maxAgeMs) / 4)));
    this.lowWaterNow = Math.ceil((this.capacity * this.lowWater) / this.bufferSize);
    const want = this.capacity - this.buffer.available + this.owed;
    return Math.min(this.maxBatch, Math.max(1, want));
  }

  /**
   * One refill: the home region's healthy nodes round-robin, each tried at once after the previous one
   * failed; then, only if the buffer is empty, each fallback region's in the configured order (docs/design.md §7).
   * With hedging on, an attempt not answered within its node's hedge delay is joined by one on the next node of
   * that walk; the first answer to pass the block checks wins, and whatever still runs when the round returns is
   * a loser whose answer is discarded (attempt()).
   */
  private async fetchRound(count: number): Promise<RoundOutcome> {
    const round: Round = { tried: new Set(), regionIndex: 0, readyWaited: -1, settled: false };
    const running: RunningAttempt[] = [];
    try {
      for (;;) {
        if (this.closed) return { kind: 'closed' };
        if (running.length === 0) {
          const next = await this.nextNode(round);
          if (this.closed) return { kind: 'closed' };
          if (next === undefined) return { kind: 'failed' };
          running.push(this.launch(round, next, round.regionIndex, count, false));
        }
        const finished = await this.nextFinished(running);
        if (this.closed) return { kind: 'closed' };
        if (finished === undefined) {
          this.sendHedge(round, running, count);
          continue;
        }
        running.splice(running.indexOf(finished), 1);
        const outcome = finished.outcome as AttemptOutcome;
        if (outcome.kind === 'ok') {
          const region = this.regions[finished.regionIndex] as RegionGroup;
          const attributes = { [CLIENT_METRIC_ATTRIBUTES.region]: region.group.region };
          if (finished.hedge) {
            this.counters.hedgesWon++;
            this.instruments.hedgesWon.add(1, attributes);
          }
          if (finished.regionIndex > 0) {
            this.counters.failovers++;
            this.instruments.failoversByRegion.add(1, attributes);
          }
          return outcome;
        }
        if (outcome.kind === 'rejected') return outcome;
        if (outcome.kind === 'failed') {
          // The attempt still running may hedge again (its delay has passed: at once), as a failed attempt
          // without hedging is followed by the next node at once; the round's `tried` bounds this.
          for (const r of running) r.hedged = false;
          this.counters.retries++;
          // The node may be gone from discovery's source (a DNS record removed): let it look again soon.
          discoveryNodeFailed((this.regions[finished.regionIndex] as RegionGroup).discovery, finished.node.url);
        }
      }
    } finally {
      // Whatever still runs has lost: its answer, if one comes, is discarded (a gap, never a duplicate).
      round.settled = true;
    }
  }

  /** The next node of the round's walk (waiting for a region's discovery once), or `undefined` at its end. */
  private async nextNode(round: Round): Promise<NodeState | undefined> {
    for (; round.regionIndex < this.regions.length; round.regionIndex++) {
      const region = this.regions[round.regionIndex] as RegionGroup;
      if (round.regionIndex > 0) {
        // Failover only with the buffer empty (docs/design.md §7).
        this.expire(this.clock.monoMs());
        if (this.buffer.available > 0) return undefined;
      }
      if (round.readyWaited !== round.regionIndex) {
        round.readyWaited = round.regionIndex;
        await this.waitReady(region);
        if (this.closed) return undefined;
      }
      const node = region.group.pick(this.clock.monoMs(), round.tried);
      if (node !== undefined) {
        round.tried.add(node);
        return node;
      }
    }
    return undefined;
  }

  /** Starts an attempt of the round, tracked so close() can abort and await it even once the round has moved on. */
  private launch(round: Round, node: NodeState, regionIndex: number, count: number, hedge: boolean): RunningAttempt {
    const controller = new AbortController();
    const group = (this.regions[regionIndex] as RegionGroup).group;
    const running: RunningAttempt = {
      node,
      regionIndex,
      startedMs: this.clock.monoMs(),
      hedge,
      hedged: false,
      outcome: undefined,
      done: undefined as unknown as Promise<RunningAttempt>,
    };
    const settled = this.attempt(group, node, count, round, controller).then(
      (outcome) => outcome,
      (e: unknown): AttemptOutcome => ({ kind: 'rejected', error: IdClientError.from(e) }),
    );
    this.attempts.set(controller, { node, round, settled });
    running.done = settled.then((outcome) => {
      this.attempts.delete(controller);
      running.outcome = outcome;
      return running;
    });
    return running;
  }

  /**
   * The next attempt to end; or `undefined` when the one attempt running reached its hedge delay first. The
   * hedge timer is the only timer hedging adds: one per refill, cancelled when the answer comes first.
   */
  private async nextFinished(running: readonly RunningAttempt[]): Promise<RunningAttempt | undefined> {
    const only = running.length === 1 ? (running[0] as RunningAttempt) : undefined;
    if (only === undefined) return Promise.race(running.map((r) => r.done));
    if (this.hedge === undefined || only.hedged) return only.done;
    const delayMs = only.startedMs + this.hedge.delayMs(only.node) - this.clock.monoMs();
    let cancel: () => void = () => undefined;
    const hedgeDue = new Promise<undefined>((resolve) => {
      cancel = this.clock.schedule(() => resolve(undefined), Math.max(0, delayMs));
    });
    try {
      return await Promise.race([only.done, hedgeDue]);
    } finally {
      cancel();
    }
  }

  /**
   * The hedge of the one running attempt: the next node of the walk, this region's or (with no home node left and
   * the buffer empty) a ready fallback region's. No node left: no hedge, the attempt runs on alone.
   */
  private sendHedge(round: Round, running: RunningAttempt[], count: number): void {
    (running[0] as RunningAttempt).hedged = true;
    const now = this.clock.monoMs();
    for (let i = round.regionIndex; i < this.regions.length; i++) {
      const region = this.regions[i] as RegionGroup;
      if (i > 0) {
        this.expire(now);
        if (this.buffer.available > 0) return;
      }
      // A region still waiting for its discovery's first list is left to the walk (which waits, bounded).
      if (!region.isReady) continue;
      const node = region.group.pick(now, round.tried);
      if (node === undefined) continue;
      round.tried.add(node);
      this.counters.hedgesSent++;
      this.instruments.hedgesSent.add(1, { [CLIENT_METRIC_ATTRIBUTES.region]: region.group.region });
      running.push(this.launch(round, node, i, count, true));
      return;
    }
  }

  private async waitReady(region: RegionGroup): Promise<void> {
    if (region.isReady) return;
    // Discovery's first list: bounded, so a hanging discovery cannot stall the other regions.
    let cancel: (() => void) | undefined;
    await Promise.race([
      region.ready,
      new Promise<void>((resolve) => {
        cancel = this.clock.schedule(resolve, this.attemptTimeoutMs);
      }),
    ]);
    cancel?.();
  }

  /**
   * One request to one node. Its answer is checked and kept only while the round has no winner; once it has,
   * the answer is discarded unchecked and counted: the block guard remembers only what reaches the buffer, so a
   * loser's late block is neither checked against the winner's (no false refusal) nor handed out.
   */
  private async attempt(
    group: NodeGroup,
    node: NodeState,
    count: number,
    round: Round,
    controller: AbortController,
  ): Promise<AttemptOutcome> {
    const timeoutMs = this.attemptTimeoutMs;
    node.inFlight++;
    const startedMs = this.clock.monoMs();
    let cancelTimer: () => void = () => undefined;
    try {
      node.transport ??= this.transportFactory(
        node.servername === undefined
          ? { url: node.url, region: node.region }
          : { url: node.url, region: node.region, servername: node.servername },
      );
      const transport: IdTransport = node.transport;
      const timedOut = new Promise<never>((_, reject) => {
        cancelTimer = this.clock.schedule(() => {
          // A frozen node hangs rather than refuses: the attempt's own deadline moves on (docs/design.md §7).
          const e = new ConnectError(`no answer within ${timeoutMs} ms`, Code.DeadlineExceeded);
          controller.abort(e);
          reject(e);
        }, timeoutMs);
      });
      const blocks = await Promise.race([transport.nextIds(count, { signal: controller.signal, timeoutMs }), timedOut]);
      checkBlocks(blocks, count);
      const arrivalMs = this.clock.monoMs();
      recordLatency(node, arrivalMs - startedMs);
      if (round.settled) {
        // The round has its IDs (or has ended): these are never handed out, so they are not checked either.
        group.markOk(node);
        this.counters.hedgeBlocksDiscarded += blocks.length;
        this.instruments.hedgeBlocksDiscarded.add(blocks.length, { [CLIENT_METRIC_ATTRIBUTES.region]: node.region });
        return { kind: 'discarded' };
      }
      this.refuseWrongBlocks(blocks, node);
      // Same tick as the guard's accept: no other answer of this round can win now.
      round.settled = true;
      group.markOk(node);
      this.instruments.refillLatency.record(arrivalMs - startedMs, {
        [CLIENT_METRIC_ATTRIBUTES.region]: node.region,
      });
      return { kind: 'ok', blocks, arrivalMs };
    } catch (e) {
      // A loser ended because its node left discovery (abortRemovedLosers): nothing to learn from it.
      if (node.removed && round.settled) return { kind: 'failed' };
      const now = this.clock.monoMs();
      const c: ClassifiedFailure =
        e instanceof RefusedBlocksError ? { kind: 'node', code: e.code, message: e.message } : classifyFailure(e);
      const failure: AttemptFailure = {
        node: node.url,
        region: node.region,
        code: c.code,
        message: c.message,
        atMonoMs: now,
      };
      if (!this.closed) {
        this.recentFailures.push(failure);
        if (this.recentFailures.length > FAILURES_KEPT) this.recentFailures.shift();
      }
      if (c.kind === 'request') {
        // Every node would say the same: not retried elsewhere (a bad request would
        // only load the whole region), the callers get the reason.
        return {
          kind: 'rejected',
          error: new IdClientError(
            'rejected',
            `${node.url} rejected NextIds(${count}): ${c.code}: ${c.message}`,
            false,
            {
              cause: e,
            },
          ),
        };
      }
      if (!this.closed) group.markFailed(node, now, failure);
      return { kind: 'failed' };
    } finally {
      cancelTimer();
      node.inFlight--;
      if (node.removed && node.inFlight === 0) this.closeTransport(node);
    }
  }

  /**
   * The per-block checks (block-guard.ts), before any ID of the response reaches the buffer: a refused
   * response counts its blocks, and throws so the node is marked failed and the next node tried.
   */
  private refuseWrongBlocks(blocks: readonly IdBlock[], node: NodeState): void {
    const refusal = this.guard.check(blocks, node.url);
    if (refusal === undefined) {
      this.guard.accept(blocks);
      return;
    }
    if (refusal.reason === 'foreign-region') this.counters.refusedForeignRegion += refusal.blocks;
    else this.counters.refusedReplayed += refusal.blocks;
    this.instruments.blocksRefused.add(refusal.blocks, {
      [CLIENT_METRIC_ATTRIBUTES.region]: refusal.region,
      [CLIENT_METRIC_ATTRIBUTES.refusal]: refusal.reason,
    });
    throw new RefusedBlocksError(
      refusal.reason === 'foreign-region' ? 'foreign_region' : 'replayed_block',
      refusal.message,
    );
  }

  /** Waits until the first backing-off node may be tried again, a discovery change, or close. */
  private sleepUntilRetry(): Promise<void> {
    const now = this.clock.monoMs();
    let earliest: number | undefined;
    for (const r of this.regions) {
      const t = r.group.earliestRetryMs();
      if (t !== undefined && (earliest === undefined || t < earliest)) earliest = t;
    }
    const delay = earliest === undefined ? this.attemptTimeoutMs : Math.min(Math.max(1, earliest - now), 1000);
    return new Promise<void>((resolve) => {
      const done = (): void => {
        cancel();
        this.wake = undefined;
        resolve();
      };
      const cancel = this.clock.schedule(done, delay);
      this.wake = done;
    });
  }

  // ---- nodes -------------------------------------------------------------------------------------

  private watchDiscovery(group: NodeGroup, discovery: NodeDiscovery, tls: boolean): RegionGroup {
    let watched = false;
    let markReady: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => {
      markReady = resolve;
    });
    const apply = (nodes: readonly DiscoveredNode[]): void => {
      if (this.closed) return;
      const mine = nodes.filter((n) => n.region === undefined || n.region === group.region);
      const urls = mine.map((n) => toBaseUrl(n.address, tls));
      const servernames = new Map<string, string>();
      mine.forEach((n, i) => {
        if (n.servername !== undefined) servernames.set(urls[i] as string, n.servername);
      });
      // A new node may be what a sleeping refill waits for.
      if (group.setUrls(urls, servernames)) {
        this.abortRemovedLosers();
        this.wake?.();
      }
    };
    const unwatch = discovery.watch((nodes: readonly DiscoveredNode[]) => {
      watched = true;
      apply(nodes);
      markReady();
    });
    discovery.list().then(
      (nodes) => {
        // A watch event may have overtaken the first list: the newer one wins.
        if (!watched) apply(nodes);
        markReady();
      },
      () => markReady(),
    );
    const region: RegionGroup = { group, ready, isReady: false, unwatch, discovery, owned: undefined };
    void ready.then(() => {
      region.isReady = true;
    });
    return region;
  }

  /**
   * Ends the losing requests still running on nodes discovery no longer lists: their answers would be discarded
   * anyway, and ending them closes the node's connection now rather than when a slow node answers.
   */
  private abortRemovedLosers(): void {
    for (const [controller, a] of this.attempts) {
      if (a.node.removed && a.round.settled) {
        controller.abort(new ConnectError(`${a.node.url} left discovery`, Code.Canceled));
      }
    }
  }

  private closeTransport(node: NodeState): void {
    const transport = node.transport;
    node.transport = undefined;
    try {
      transport?.close();
    } catch {
      // Closing a broken connection may throw; it is gone either way.
    }
  }
}

/** Rejects a response that is not `1 … count` IDs in increasing, non-overlapping, in-range blocks. */
function checkBlocks(blocks: readonly IdBlock[], count: number): void {
  let total = 0;
  let previousLast = -1n;
  for (const b of blocks) {
    if (typeof b.first !== 'bigint' || !Number.isInteger(b.count) || b.count < 1) {
      throw new ConnectError(`invalid response: block ${String(b.first)}+${String(b.count)}`, Code.Internal);
    }
    const last = b.first + BigInt(b.count) - 1n;
    if (b.first <= previousLast || b.first < 0n || last > MAX_ID) {
      throw new ConnectError(
        `invalid response: block ${b.first}+${b.count} overlaps or is out of range`,
        Code.Internal,
      );
    }
    previousLast = last;
    total += b.count;
  }
  if (total < 1 || total > count) {
    throw new ConnectError(`invalid response: ${total} IDs for a request of ${count}`, Code.Internal);
  }
}

/** A response the block checks refused: the node is marked failed with this code (not a Connect code). */
class RefusedBlocksError extends Error {
  constructor(
    readonly code: 'foreign_region' | 'replayed_block',
    message: string,
  ) {
    super(message);
  }
}

/** A discovery's `problem()`, never throwing (it is only a hint in an error message). */
function discoveryProblem(discovery: NodeDiscovery | undefined): string | undefined {
  try {
    return discovery?.problem?.();
  } catch {
    return undefined;
  }
}

/** Tells a discovery a node failed, never throwing (it only speeds up a re-resolve). */
function discoveryNodeFailed(discovery: NodeDiscovery | undefined, url: string): void {
  try {
    discovery?.nodeFailed?.(url);
  } catch {
    // A hint only: the client goes on with the next node either way.
  }
}

function closedError(): IdClientError {
  return new IdClientError('closed', 'the ID client is closed', false);
}

function integerIn(name: string, value: number, min: number, max: number, why = ''): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer from ${min} to ${max}${why}, got ${String(value)}`);
  }
  return value;
}

function durationMs(name: string, value: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_DURATION_MS) {
    throw new RangeError(`${name} must be a number of ms above 0 and at most ${MAX_DURATION_MS}, got ${String(value)}`);
  }
  return value;
}
