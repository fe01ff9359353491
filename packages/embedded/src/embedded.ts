import { setTimeout as sleep } from 'node:timers/promises';
import {
  DEFAULT_MAX_OFFSET_MS,
  createGuardedMinter,
  createTimeSourceCheck,
  isFencedError,
  type FencedError,
  type GuardStatus,
  type GuardedMinter,
  type TimeSourceCheck,
  untilTimeSourceHealthy,
} from '@idgen/clock-guard';
import {
  MAX_NEXT_IDS,
  createIdForms,
  type CallOptions,
  type FormCallOptions,
  type IdForm,
  type IdForms,
  type IdInForm,
  type MintedBlock,
} from '@idgen/core';
import {
  createEtcdLease,
  isLeaseError,
  isNoFreeWorkerError,
  parseWorkerRange,
  silentLogger,
  type LeaseLogger,
  type LeaseSnapshot,
  type NoFreeWorkerError,
  type WorkerLease,
  type WorkerRange,
} from '@idgen/lease';
import {
  IdsUnavailableError,
  RangeFullError,
  closedError,
  isIdClientError,
  type IdClientError,
  type UnavailableReason,
} from './errors.js';
import { refuseUnknownEmbeddedOptions } from './options-check.js';
import type { EmbeddedIdSourceOptions } from './options.js';

export type { EmbeddedIdSourceOptions } from './options.js';
import { DEFAULT_EMBEDDED_WORKERS } from './slot-budget.js';

/** Default deadline of one asynchronous call, as the client's (`deadlineMs`, 2000 ms). */
export const DEFAULT_DEADLINE_MS = 2000;
/** Default time a start waits for a free slot in a full range before giving up. */
export const DEFAULT_SLOT_WAIT_MS = 30_000;
/** Largest `nextIds` count, the same for every ID source (`@idgen/core`). */
export { MAX_NEXT_IDS } from '@idgen/core';
/** How often waiting calls look again, besides the guard's state changes. */
const RETRY_MS = 20;

/** Options of one asynchronous call: the contract every ID source shares (`@idgen/core`). */
export type { CallOptions } from '@idgen/core';

/** Where an embedded source is in its life. */
export type EmbeddedState =
  'starting' | 'waiting-for-time-source' | 'waiting-for-slot' | 'claiming' | 'running' | 'failed' | 'closed';

/** What {@link EmbeddedIdSource.status} reports. */
export interface EmbeddedStatus {
  readonly state: EmbeddedState;
  readonly region: number;
  readonly workers: WorkerRange;
  /** The slot held now, if any. */
  readonly worker: number | undefined;
  /** Whether a mint now would succeed (not fenced). */
  readonly canMint: boolean;
  /** The guard's state, with its fence reason when fenced. */
  readonly guard: GuardStatus;
  readonly lease: LeaseSnapshot;
  /** IDs minted since the source was created. */
  readonly minted: number;
  /** Why the start failed, once it has. */
  readonly failure: string | undefined;
}

/**
 * IDs minted in the caller's process (docs/design.md §7). The asynchronous calls have the names and signatures of
 * `IdClient` from `@idgen/client`, so code written against one takes the other by configuration.
 */
export interface EmbeddedIdSource {
  /**
   * One new ID in a form (docs/design.md §1 "Forms"): `base32` and `decimal` as sortable text, `spread` and `keyed`
   * as a bigint. An unknown form, or `keyed` without the source's `keyedFormKey`, rejects with `TypeError` and mints
   * no ID.
   */
  nextId<F extends IdForm>(options: FormCallOptions<F>): Promise<IdInForm<F>>;
  /** One new ID; waits (up to the deadline) while not assigned or fenced, then rejects with `IdsUnavailableError`. */
  nextId(options?: CallOptions): Promise<bigint>;
  /** `count` new IDs in a form, as {@link nextId} with `form`. */
  nextIds<F extends IdForm>(count: number, options: FormCallOptions<F>): Promise<IdInForm<F>[]>;
  /** `count` new IDs (1 … 65,536), increasing; waits like {@link nextId}. */
  nextIds(count: number, options?: CallOptions): Promise<bigint[]>;
  /** One new ID as a decimal string. */
  nextIdString(options?: CallOptions): Promise<string>;
  /** An ID now, or `undefined` when none may be minted now; never waits, never throws for a fence. */
  tryNextId(): bigint | undefined;
  /** {@link nextIdSync} in a form; throws `TypeError` for an unknown form or `keyed` without a key, minting none. */
  nextIdSync<F extends IdForm>(options: { readonly form: F }): IdInForm<F>;
  /** One new ID, synchronously, for hot loops: throws `IdsUnavailableError` at once when none may be minted. */
  nextIdSync(): bigint;
  /** {@link nextIdSync} as a decimal string. */
  nextIdStringSync(): string;
  /** `count` IDs (1 … 65,536) synchronously; a count beyond this millisecond's sequence waits (busy) for the next. */
  nextIdsSync(count: number): bigint[];
  /** Resolves once the source holds a slot and may mint; rejects when the start failed for good, or on close. */
  ready(): Promise<void>;
  status(): EmbeddedStatus;
  /**
   * Stops minting, rejects waiting calls (code `closed`), writes the slot's final `last-ms` marked released and
   * revokes the lease, so the slot's next holder may start right above this source's last millisecond. Idempotent.
   */
  close(): Promise<void>;
}

interface Waiter {
  readonly count: number;
  readonly ids: bigint[];
  readonly startedMs: number;
  readonly deadlineAt: number;
  readonly signal: AbortSignal | undefined;
  readonly resolve: (ids: bigint[]) => void;
  readonly reject: (e: unknown) => void;
  readonly onAbort: () => void;
}

/**
 * The lease's etcd messages name idgen-server's flags (`--etcd-ca`, `--etcd-user`); a library caller set options:
 * name those instead (issue 33: a message should speak the caller's language).
 */
function inOptionWords(message: string): string {
  return message
    .replace('--etcd-user / --etcd-password-file', 'etcd.auth: { username, password }')
    .replace(
      '--etcd-ca, --etcd-cert, --etcd-key and https:// endpoints',
      'etcd.tls: { ca, cert, key } and https:// endpoints',
    )
    .replace(/--etcd-(ca|cert|key)\b/g, 'etcd.tls.$1')
    .replace(/--etcd-user\b/g, 'etcd.auth.username')
    .replace(/--etcd-password-file\b/g, 'etcd.auth.password')
    .replace(/--etcd-prefix\b/g, 'etcd.prefix')
    .replace(/--etcd\b/g, 'etcd.endpoints')
    .replace(/--region\b/g, 'region');
}

/**
 * Creates an embedded ID source and starts it: the time-source check (unless `timeSource: 'none'`), then the
 * worker lease (`kind: embedded`, never registered for discovery: it serves nobody), then minting once the lease
 * has claimed a slot and the clock has passed the slot's floor. Every option is checked at once: a bad value
 * throws (`LeaseConfigError`, `RangeError`) before any I/O.
 *
 * The same rules as a generator node (docs/design.md §4, §5): the guard refuses after the lease's monotonic
 * deadline and above its wall ceiling, waits out small rollbacks and fences on large ones, never mints at or
 * below the floor; close writes the final `last-ms`. A refusal is `IdsUnavailableError`, never an invented ID.
 *
 * The lease's keep-alives run on the caller's event loop: a loop that never yields for longer than the TTL less
 * the margin and an interval (3 s at the defaults) fences the source (`lease`), as it must. Hot loops yield now
 * and then (`await` anything).
 */
export function createEmbeddedIdSource(options: EmbeddedIdSourceOptions): EmbeddedIdSource {
  return new LeasedIdSource(options);
}

/**
 * Where a source is in its life ({@link EmbeddedState}), with the error every call gets once its start failed for
 * good. `failed` and `closed` are final: a start step that ends after close() cannot move the source back.
 */
type SourceState =
  | { readonly name: Exclude<EmbeddedState, 'failed' | 'closed'> }
  | { readonly name: 'failed'; readonly failure: IdClientError }
  | { readonly name: 'closed'; readonly failure: IdClientError | undefined };

class LeasedIdSource implements EmbeddedIdSource {
  private readonly guard: GuardedMinter;
  private readonly lease: WorkerLease;
  private readonly timeSource: TimeSourceCheck;
  private readonly logger: LeaseLogger;
  private readonly region: number;
  private readonly workers: WorkerRange;
  private readonly deadlineMs: number;
  private readonly slotWaitMs: number;
  private readonly timeSourceRetryMs: number;
  private readonly backoffMaxMs: number;
  private readonly lifetime = new AbortController();
  private readonly started: Promise<void>;
  private readonly unsubscribe: () => void;
  private readonly forms: IdForms;

  private state: SourceState = { name: 'starting' };
  private closing: Promise<void> | undefined;
  private waiters: Waiter[] = [];
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private retryImmediate: ReturnType<typeof setImmediate> | undefined;
  private draining = false;

  constructor(options: EmbeddedIdSourceOptions) {
    refuseUnknownEmbeddedOptions(options);
    this.region = options.region;
    this.logger = options.logger ?? silentLogger;
    this.deadlineMs = positive('deadlineMs', options.deadlineMs ?? DEFAULT_DEADLINE_MS);
    this.slotWaitMs = nonNegative('slotWaitMs', options.slotWaitMs ?? DEFAULT_SLOT_WAIT_MS);
    this.timeSourceRetryMs = positive('timeSourceRetryMs', options.timeSourceRetryMs ?? 2000);
    this.backoffMaxMs = options.backoff?.maxMs ?? 2000;
    const mode = options.timeSource ?? 'chrony';
    if (mode !== 'chrony' && mode !== 'none')
      throw new RangeError(`timeSource must be "chrony" or "none", got ${JSON.stringify(mode)}`);
    if (typeof options.etcd !== 'object' || options.etcd === null)
      throw new TypeError('etcd must be the connection options ({ endpoints: [...] })');
    this.workers =
      typeof options.workers === 'string'
        ? parseWorkerRange(options.workers)
        : (options.workers ?? DEFAULT_EMBEDDED_WORKERS);

    this.forms = createIdForms({ layout: options.layout, key: options.keyedFormKey });
    this.guard = createGuardedMinter({
      region: options.region,
      ...(options.layout === undefined ? {} : { layout: options.layout }),
      ...(options.maxRollbackMs === undefined ? {} : { maxRollbackMs: options.maxRollbackMs }),
      ...(options.maxFenceMs === undefined ? {} : { maxFenceMs: options.maxFenceMs }),
      ...(options.meter === undefined ? {} : { meter: options.meter }),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    });
    try {
      this.lease = createEtcdLease(
        {
          ...options.etcd,
          region: options.region,
          workers: this.workers,
          kind: 'embedded',
          waitForFreeSlot: false, // a full range is waited for here, bounded (slotWaitMs)
          // As the server derives it from --lease-ttl: a third of the TTL, at most 2 s.
          ...(Number.isInteger(options.ttlSeconds) && options.keepAliveIntervalMs === undefined
            ? { keepAliveIntervalMs: Math.min(2000, Math.floor(((options.ttlSeconds as number) * 1000) / 3)) }
            : {}),
          ...pick(options, [
            'nodeId',
            'ttlSeconds',
            'keepAliveIntervalMs',
            'keepAliveTimeoutMs',
            'fenceMarginMs',
            'clockBoundMs',
            'requestTimeoutMs',
            'backoff',
            'layout',
            'meter',
            'logger',
            'clock',
            'borrowSpare',
            'registry',
          ]),
        },
        this.guard,
      );
    } catch (e) {
      this.guard.close();
      throw e;
    }
    this.timeSource = createTimeSourceCheck({
      mode,
      guard: this.guard,
      maxOffsetMs: options.maxClockOffsetMs ?? DEFAULT_MAX_OFFSET_MS,
      ...(options.chronycPath === undefined ? {} : { chronycPath: options.chronycPath }),
      logger: this.logger,
    });
    const onFatal =
      options.onFatal ??
      ((reason: string) =>
        this.logger.error({ reason }, 'embedded: clock fenced past maxFenceMs; the source stays fenced'));
    const offFatal = this.guard.on('fatal', onFatal);
    const offState = this.guard.on('state', (s) => {
      if (s.state === 'serving') this.serveWaiters();
    });
    this.unsubscribe = () => {
      offFatal();
      offState();
    };
    this.started = this.start();
    this.started.catch(() => undefined); // observed through ready() and the calls
  }

  // ---- minting -------------------------------------------------------------------------------------

  nextIdSync<F extends IdForm>(options: { readonly form: F }): IdInForm<F>;
  nextIdSync(): bigint;
  nextIdSync(options?: { readonly form: IdForm }): bigint | string {
    if (options?.form === undefined) return this.nextPlainIdSync();
    const form = this.forms.check(options.form); // before minting: a wrong form costs no ID
    return this.forms.format(this.nextPlainIdSync(), form);
  }

  private nextPlainIdSync(): bigint {
    try {
      return this.guard.next();
    } catch (e) {
      throw this.refusal(e, 0);
    }
  }

  nextIdStringSync(): string {
    return this.nextIdSync().toString();
  }

  nextIdsSync(count: number): bigint[] {
    checkCount(count);
    let blocks: MintedBlock[];
    try {
      blocks = this.guard.nextBlock(count);
    } catch (e) {
      throw this.refusal(e, 0);
    }
    return expand(blocks, count);
  }

  tryNextId(): bigint | undefined {
    try {
      return this.guard.next();
    } catch {
      return undefined;
    }
  }

  nextId<F extends IdForm>(options: FormCallOptions<F>): Promise<IdInForm<F>>;
  nextId(options?: CallOptions): Promise<bigint>;
  nextId(options?: CallOptions | FormCallOptions): Promise<bigint | string> {
    return this.forms.nextInForm(options, () => this.nextPlainId(options));
  }

  private nextPlainId(options: CallOptions | undefined): Promise<bigint> {
    if (this.waiters.length === 0) {
      try {
        return Promise.resolve(this.guard.next());
      } catch (e) {
        if (!isFencedError(e) || this.closed || this.failure !== undefined) return Promise.reject(this.refusal(e, 0));
      }
    }
    return this.enqueue(1, options).then((ids) => ids[0] as bigint);
  }

  nextIds<F extends IdForm>(count: number, options: FormCallOptions<F>): Promise<IdInForm<F>[]>;
  nextIds(count: number, options?: CallOptions): Promise<bigint[]>;
  nextIds(count: number, options?: CallOptions | FormCallOptions): Promise<(bigint | string)[]> {
    return this.forms.manyInForm(options, () => this.nextPlainIds(count, options));
  }

  private nextPlainIds(count: number, options: CallOptions | undefined): Promise<bigint[]> {
    try {
      checkCount(count);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.enqueue(count, options);
  }

  nextIdString(options?: CallOptions): Promise<string> {
    return this.nextId(options).then((id) => id.toString());
  }

  /** Turns a guard refusal (or anything thrown) into the error a caller gets. */
  private refusal(e: unknown, waitedMs: number): unknown {
    if (this.closed) return closedError();
    if (this.failure !== undefined) return this.failure;
    if (!isFencedError(e)) return e;
    return unavailable(e, waitedMs);
  }

  // ---- waiting calls -------------------------------------------------------------------------------

  private enqueue(count: number, options: CallOptions | undefined): Promise<bigint[]> {
    if (this.closed) return Promise.reject(closedError());
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const deadlineMs = options?.deadlineMs ?? this.deadlineMs;
    if (!(deadlineMs > 0))
      return Promise.reject(new RangeError(`deadlineMs must be above 0, got ${String(deadlineMs)}`));
    return new Promise<bigint[]>((resolve, reject) => {
      const startedMs = performance.now();
      const waiter: Waiter = {
        count,
        ids: [],
        startedMs,
        deadlineAt: startedMs + deadlineMs,
        signal,
        resolve,
        reject,
        onAbort: () => this.settle(waiter, signal?.reason),
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.waiters.push(waiter);
      this.serveWaiters();
    });
  }

  private settle(w: Waiter, error: unknown, ids?: bigint[]): void {
    const i = this.waiters.indexOf(w);
    if (i < 0) return;
    this.waiters.splice(i, 1);
    w.signal?.removeEventListener('abort', w.onAbort);
    if (ids !== undefined) w.resolve(ids);
    else w.reject(error);
  }

  /**
   * Serves waiting calls in order with what the clock allows now (never waiting for a millisecond on the caller's
   * loop: the rest waits for a later turn); a fenced guard leaves them waiting, each until its deadline.
   */
  private serveWaiters(): void {
    if (this.draining) return;
    this.draining = true;
    let fenced = false;
    try {
      while (this.waiters.length > 0) {
        const w = this.waiters[0] as Waiter;
        const now = performance.now();
        let blocks: MintedBlock[];
        try {
          blocks = this.guard.tryNextBlock(w.count - w.ids.length);
        } catch (e) {
          if (!isFencedError(e)) {
            this.settle(w, e);
            continue;
          }
          // Fenced: every waiter past its deadline gets the reason; the rest wait for the fence to lift.
          fenced = true;
          for (const x of [...this.waiters]) {
            if (now >= x.deadlineAt) this.settle(x, this.refusal(e, Math.round(now - x.startedMs)));
          }
          break;
        }
        for (const b of blocks) for (let i = 0; i < b.count; i++) w.ids.push(b.first + BigInt(i));
        if (w.ids.length >= w.count) {
          this.settle(w, undefined, w.ids);
          continue;
        }
        break; // this millisecond's sequence is spent: the rest on a later turn
      }
    } finally {
      this.draining = false;
    }
    this.armRetry(fenced);
  }

  /** Looks again on the next turn of the loop (a spent millisecond) or soon (a fence), until each deadline. */
  private armRetry(fenced: boolean): void {
    if (this.waiters.length === 0 || this.retryTimer !== undefined || this.retryImmediate !== undefined) return;
    if (!fenced) {
      this.retryImmediate = setImmediate(() => {
        this.retryImmediate = undefined;
        this.serveWaiters();
      });
      return;
    }
    const untilDeadline = Math.min(...this.waiters.map((x) => x.deadlineAt)) - performance.now();
    this.retryTimer = setTimeout(
      () => {
        this.retryTimer = undefined;
        this.serveWaiters();
      },
      Math.max(0, Math.min(RETRY_MS, untilDeadline)),
    );
  }

  // ---- life cycle ----------------------------------------------------------------------------------

  /** docs/design.md §5 boot steps 2-5 (no step 6: an embedded holder registers nowhere). */
  private async start(): Promise<void> {
    const signal = this.lifetime.signal;
    try {
      await untilTimeSourceHealthy(this.timeSource, {
        retryMs: this.timeSourceRetryMs,
        signal,
        onUnhealthy: (reading) => {
          this.moveTo('waiting-for-time-source');
          this.logger.error(
            { problem: reading.problem, timeSource: reading.message },
            'embedded: time source unhealthy, not minting; re-checking',
          );
        },
      });
      signal.throwIfAborted();
      this.moveTo('claiming');
      await this.claim(signal);
      this.moveTo('running');
      this.serveWaiters();
    } catch (e) {
      if (this.closed) throw closedError();
      const failure = isIdClientError(e)
        ? e
        : new IdsUnavailableError(
            `the embedded source could not start: ${inOptionWords(e instanceof Error ? e.message : String(e))}`,
            {
              reason: 'start-failed',
              waitedMs: 0,
              cause: e,
              retryable: isLeaseError(e) ? e.retryable : true,
            },
          );
      this.state = { name: 'failed', failure };
      this.logger.error({ err: failure.message }, 'embedded: start failed');
      for (const w of [...this.waiters]) this.settle(w, failure);
      throw failure;
    }
  }

  /** Claims a slot; a full range is tried again with backoff for up to `slotWaitMs`, then a clear error. */
  private async claim(signal: AbortSignal): Promise<void> {
    const t0 = performance.now();
    let delay = 250;
    for (let attempt = 0; ; attempt++) {
      try {
        await this.lease.start(signal);
        return;
      } catch (e) {
        if (!isNoFreeWorkerError(e) || signal.aborted) throw e;
        const waited = performance.now() - t0;
        if (waited >= this.slotWaitMs) throw this.rangeFull(e, waited);
        if (attempt === 0) {
          this.moveTo('waiting-for-slot');
          this.logger.warn(
            { region: this.region, workers: `${this.workers.first}-${this.workers.last}`, holders: e.holders.length },
            'embedded: every slot of the range is held; waiting',
          );
        }
        await sleep(Math.min(delay, this.slotWaitMs - waited), undefined, { signal });
        delay = Math.min(delay * 2, this.backoffMaxMs);
      }
    }
  }

  private rangeFull(e: NoFreeWorkerError, waitedMs: number): RangeFullError {
    const { first, last } = this.workers;
    const slots = last - first + 1;
    const refused = e.refused.length > 0 ? `, ${e.refused.length} refused for an unreadable last-ms` : '';
    return new RangeFullError(
      `no free worker slot in region ${this.region}'s range ${first}-${last} (${slots} slot${slots === 1 ? '' : 's'}): ` +
        `${e.holders.length} held by other holders${refused}, still after waiting ${Math.round(waitedMs)} ms (slotWaitMs ${this.slotWaitMs}). ` +
        'Widen the range (workers), or find stale holders with `idgen leases` (docs/design.md §7, slot budget)',
      this.region,
      { first, last },
      e.holders.length,
      Math.round(waitedMs),
      e,
    );
  }

  /** Moves the start along; never out of `failed` or `closed`. */
  private moveTo(name: Exclude<EmbeddedState, 'failed' | 'closed'>): void {
    if (this.state.name !== 'failed' && this.state.name !== 'closed') this.state = { name };
  }

  private get closed(): boolean {
    return this.state.name === 'closed';
  }

  /** Why the start stopped for good, once it has (kept after close() for status()): every call gets it. */
  private get failure(): IdClientError | undefined {
    return this.state.name === 'failed' || this.state.name === 'closed' ? this.state.failure : undefined;
  }

  ready(): Promise<void> {
    return this.started;
  }

  status(): EmbeddedStatus {
    const guard = this.guard.status();
    const lease = this.lease.snapshot();
    return {
      state: this.state.name,
      region: this.region,
      workers: this.workers,
      worker: lease.worker,
      canMint: !this.closed && this.guard.canMint(),
      guard,
      lease,
      minted: this.guard.counts().idsMinted,
      failure: this.failure?.message,
    };
  }

  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.state = { name: 'closed', failure: this.failure };
    this.guard.drain(); // no ID from here on: the final last-ms is then above everything minted
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    if (this.retryImmediate !== undefined) clearImmediate(this.retryImmediate);
    this.retryImmediate = undefined;
    for (const w of [...this.waiters]) this.settle(w, closedError());
    this.lifetime.abort(closedError());
    this.timeSource.stop();
    try {
      await this.lease.release(); // final last-ms marked released, then revoke
    } finally {
      this.unsubscribe();
      this.guard.close();
    }
  }
}

function unavailable(e: FencedError, waitedMs: number): IdsUnavailableError<UnavailableReason> {
  return new IdsUnavailableError(`no ID: ${e.reason}: ${e.message}`, { reason: e.reason, waitedMs, cause: e });
}

function expand(blocks: readonly MintedBlock[], count: number): bigint[] {
  const ids = new Array<bigint>(count);
  let k = 0;
  for (const b of blocks) for (let i = 0; i < b.count; i++) ids[k++] = b.first + BigInt(i);
  return ids;
}

function checkCount(count: number): void {
  if (!Number.isInteger(count) || count < 1 || count > MAX_NEXT_IDS) {
    throw new RangeError(`count must be an integer from 1 to ${MAX_NEXT_IDS}, got ${String(count)}`);
  }
}

function positive(name: string, v: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0)
    throw new RangeError(`${name} must be a number above 0, got ${String(v)}`);
  return v;
}

function nonNegative(name: string, v: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
    throw new RangeError(`${name} must be a number of at least 0, got ${String(v)}`);
  return v;
}

function pick<T extends object, K extends keyof T>(o: T, keys: readonly K[]): Partial<Pick<T, K>> {
  const out: Partial<Pick<T, K>> = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}
