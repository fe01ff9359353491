import { randomInt } from 'node:crypto';
import { metrics } from '@opentelemetry/api';
import type { Counter, Meter, ObservableGauge, ObservableResult } from '@opentelemetry/api';
import {
  EtcdAuthenticationFailedError,
  EtcdInvalidAuthTokenError,
  EtcdLeaseInvalidError,
  EtcdPermissionDeniedError,
  EtcdRoleNotGrantedError,
  EtcdUserNotFoundError,
} from 'etcd3';
import type { Etcd3, Lease, Watcher } from 'etcd3';
import { resolveLeaseConfig } from './config.js';
import type { EtcdLeaseOptions, LeaseConfig } from './config.js';
import {
  createEtcdClient,
  deadlineIn,
  errorText,
  outcomeUnknown,
  rangeValue,
  sleep,
  withTimeout,
} from './etcd-client.js';
import { claimSlot, isOwnLateWrite, writeLastMsRecord } from './slot-transactions.js';
import type { ClaimOutcome, SpareGuard } from './slot-transactions.js';
import { EndpointRoutes, keepAliveOnce } from './endpoint-routes.js';
import { EtcdHistory } from './etcd-history.js';
import { RegionBindingError, checkRegionBinding } from './region-binding.js';
import { holdTtlMs } from './ttl-ceiling.js';
import { checkRegionCode, lentTo, readSpareCodesLeniently } from './spare-codes.js';
import type { SpareCodeEntry } from './spare-codes.js';
import { confirmLoan, regionEtcd } from './loan-confirmation.js';
import { CorruptRecordError, LayoutMismatchError, LeaseError, NoFreeWorkerError, isLeaseError } from './errors.js';
import type { SlotHolder } from './errors.js';
import { LeaseAttributes, LeaseMetrics } from './metrics.js';
import type { ChurnEvent } from './metrics.js';
import { computeFloor, describeWorkerHolder, leaseKeys, parseLastMsRecord, parseLayoutRecord } from './records.js';
import { closeTenure, openTenure, tenureKey, updateTenureRecord } from './tenure-ledger.js';
import type { TenureWitnessRecord } from './tenure-witness.js';
import type { JoinedWrite, Tenure, TenureEnd } from './tenure-ledger.js';
import type { LastMsRecord, WorkerRecord } from './records.js';
import type { LeaseSnapshot, LeaseState, LeaseTarget, WorkerLease } from './types.js';

/** The slot a session won, fixed from its claim: where it is, the floor it mints above, its spare-code guard. */
interface SessionSlot {
  readonly region: number;
  readonly worker: number;
  /** Never mint at or below it (docs/design.md §5): the highest of the records' floor, the distrust floor and the start hold. */
  readonly floorMs: number;
  /** A slot under a borrowed spare code: its spare record as read when `lent`, compared by every refresh (§7). */
  readonly spare?: SpareGuard;
}

/**
 * Where a session is. `claiming`: the lease granted, no slot won yet. `holding`: a slot won, `last-ms` written and
 * keep-alives running while the floor is waited for; nothing is minted. `assigned`: the target mints on the slot.
 * `ended`: lost, given back or released, for good; the slot it held (if any) is kept for its final records.
 */
type SessionPhase =
  | { readonly kind: 'claiming' }
  | { readonly kind: 'holding'; readonly slot: SessionSlot }
  | { readonly kind: 'assigned'; readonly slot: SessionSlot }
  | { readonly kind: 'ended'; readonly slot: SessionSlot | undefined };

/** One granted etcd lease and the slot claimed on it. A loss ends the session; a re-claim starts a new one. */
interface Session {
  readonly lease: Lease;
  readonly leaseId: string;
  /** Ends the keep-alive loop and any floor wait of this session. */
  readonly abort: AbortController;
  phase: SessionPhase;
  /** Monotonic fence deadline: (send time of the last acknowledged keep-alive, or the grant) + TTL − margin. */
  deadline: number;
  /**
   * The mod revision of `last-ms` as this session last wrote it (or, before its first write, as the claim read
   * it; "0" when absent): every write compares it, so a write given up on cannot land after a newer one.
   */
  lastMsRevision: string;
  /** The highest `last-ms` etcd acknowledged for this session (-1 before the first): `L` of the wall ceiling. */
  ackedLastMs: number;
  /** The highest `last-ms` this session ever sent: a record it finds above this is not one of its own. */
  sentLastMs: number;
  /** Monotonic time of the last acknowledgement (or the grant), for the keep-alive age. */
  lastAckMono: number;
  fenceTimer: NodeJS.Timeout | undefined;
  /** The keep-alive loop, once started: a release waits for it so its last refresh cannot land after the final record. */
  loop?: Promise<void>;
  /** The watch on this session's own worker key (docs/design.md §5, root of trust). */
  watcher?: Watcher;
  /** This session's tenure as recorded at its claim (tenure-ledger.ts), closed at its end. */
  tenure?: Tenure;
  /** The tenure record's mod revision as this session's write left it: found at another, someone else wrote it. */
  tenureRevision?: string;
  /**
   * The history's epoch ({@link EtcdHistory.epoch}) when the session began: a distrust verdict after it covers the
   * claim's answer too (it may come from the etcd the verdict was about), so the claim is refused.
   */
  readonly historyEpoch: number;
}

/** Functions, not inline checks: a phase read after an `await` must not be narrowed by one read before it. */
function ended(s: Session): boolean {
  return s.phase.kind === 'ended';
}

function assigned(s: Session): boolean {
  return s.phase.kind === 'assigned';
}

/** The slot a session won (kept after its end), or `undefined` while it is still claiming one. */
function slotOf(s: Session): SessionSlot | undefined {
  return s.phase.kind === 'claiming' ? undefined : s.phase.slot;
}

/**
 * Why a `last-ms` write left the slot: `lost` (not ours any more, or etcd cannot be trusted: fence) or `withdrawn`
 * (the borrowed code's spare record changed: the slot is given back, not lost, docs/design.md §7).
 */
interface SlotLoss {
  readonly kind: 'lost' | 'withdrawn';
  readonly why: string;
}

function lost(why: string): SlotLoss {
  return { kind: 'lost', why };
}

/**
 * An etcd error no retry will fix: bad credentials, a role without access to the prefix, a TLS handshake
 * that fails on certificates. The node stops with it instead of retrying forever, not ready, in silence.
 */
export function etcdAccessProblem(e: unknown): string | undefined {
  if (
    e instanceof EtcdAuthenticationFailedError ||
    e instanceof EtcdUserNotFoundError ||
    e instanceof EtcdInvalidAuthTokenError
  ) {
    return `etcd refused the credentials (--etcd-user / --etcd-password-file): ${e.message}`;
  }
  if (e instanceof EtcdPermissionDeniedError || e instanceof EtcdRoleNotGrantedError) {
    return `etcd denied access: the user's role must read and write the deployment's prefix: ${e.message}`;
  }
  const text = e instanceof Error ? e.message : String(e);
  if (/certificate|CERT_|SSL|handshake|wrong version number/i.test(text)) {
    return `TLS to etcd failed (check --etcd-ca, --etcd-cert, --etcd-key and https:// endpoints): ${text}`;
  }
  return undefined;
}

/** The session was lost while claiming or waiting for the floor: the claim loop tries again. */
class SessionLostError extends Error {
  constructor(why: string) {
    super(why);
    this.name = 'SessionLostError';
  }
}

/**
 * Creates a worker-ID lease on etcd (docs/design.md §5) driving `target` (a clock guard). Validates `options` at once
 * and throws {@link LeaseConfigError} before any I/O.
 *
 * Safety rules it implements, in order of importance:
 * - the target may mint only until (send time of the last acknowledged keep-alive) + TTL − margin, measured on
 *   the monotonic clock: the holder stops before etcd can expire the lease, however slow etcd is;
 * - `last-ms` is written before the first mint and after every acknowledged keep-alive, with at least the
 *   holder's clock reading, so `last-ms + TTL` bounds everything it may mint; the deadline moves only once
 *   both the keep-alive and the `last-ms` write succeeded;
 * - every `last-ms` write is conditional on still holding the worker key, so a holder that lost the slot
 *   cannot overwrite its successor's record;
 * - a new holder waits until its wall clock passes the floor computed from `last-ms`.
 */
export function createEtcdLease(options: EtcdLeaseOptions, target: LeaseTarget): WorkerLease {
  const config = resolveLeaseConfig(options);
  return new EtcdWorkerLease(config, options.meter ?? metrics.getMeter('@idgen/lease'), target);
}

/** A slot won by a claim: its record as read in the claim's transaction, and the spare-code guard it was claimed under. */
interface ClaimedSlot {
  readonly region: number;
  readonly worker: number;
  readonly last: LastMsRecord | undefined;
  readonly revision: string;
  readonly spare?: SpareGuard;
}

class EtcdWorkerLease implements WorkerLease {
  private client: Etcd3 | undefined;
  /** The spare-code registry's client, made at a borrower's first claim under a lent code (docs/design.md §7). */
  private registryClient: Etcd3 | undefined;
  /** The loans confirmed at a claim, by mirror key: what a holder of a borrowed slot confirms again while it holds. */
  private readonly loans = new Map<string, SpareCodeEntry>();
  /** When the held borrowed slot's loan was last confirmed (monotonic ms). */
  private loanCheckedMono = 0;
  /** What this holder has seen of etcd's history: a revision that goes back or another cluster ID fences. */
  private readonly history = new EtcdHistory();
  /** Set when etcd stopped being trustworthy (docs/design.md §5): claims after it start above it + TTL + bound. */
  private untrustedSinceWall: number | undefined;
  /**
   * The TTL every hold for a holder no record shows waits by (docs/design.md §5, "The TTL ceiling"): the deployment's
   * pinned ceiling, the highest this holder has read (a restore may bring back an etcd that lost the record).
   */
  private holdTtlMs: number;
  /** The route of the keep-alives and `last-ms` refreshes: one member at a time, the next one on a failure. */
  private routes: EndpointRoutes | undefined;
  private state: LeaseState = 'idle';
  private message = 'not started';
  private session: Session | undefined;
  private address: string;
  private wantRegistered = false;
  private readonly lifetime = new AbortController();
  private starting: Promise<void> | undefined;
  private releasing: Promise<void> | undefined;
  private reclaiming: Promise<void> | undefined;
  /** Cancels of ended sessions' watches, awaited (bounded) before the client closes. */
  private readonly watchCancels = new Set<Promise<unknown>>();
  private readonly listeners = new Set<(s: LeaseSnapshot) => void>();
  private readonly churn: Counter;
  private readonly failures: Counter;
  private readonly age: ObservableGauge;
  private readonly observeAge = (r: ObservableResult): void => {
    const s = this.session;
    if (s !== undefined && !ended(s)) r.observe((this.cfg.clock.monoMs() - s.lastAckMono) / 1000);
  };

  constructor(
    private readonly cfg: LeaseConfig,
    meter: Meter,
    private readonly target: LeaseTarget,
  ) {
    this.address = cfg.address;
    this.holdTtlMs = cfg.ttlMs;
    this.churn = meter.createCounter(LeaseMetrics.churn, {
      description: 'Worker-slot lease churn: slots acquired, lost (fenced) and released.',
      unit: '{event}',
    });
    this.failures = meter.createCounter(LeaseMetrics.keepAliveFailures, {
      description: 'Keep-alives (or their last-ms refresh) that failed or timed out.',
      unit: '{failure}',
    });
    this.age = meter.createObservableGauge(LeaseMetrics.keepAliveAge, {
      description: 'Seconds since the last acknowledged keep-alive of the held lease.',
      unit: 's',
    });
    this.age.addCallback(this.observeAge);
    // Every series exists from the start, at 0: `rate()` and `increase()` have a baseline, and an
    // alert on the first keep-alive failure or the first lost slot fires.
    for (const event of [LeaseAttributes.acquired, LeaseAttributes.lost, LeaseAttributes.released])
      this.churn.add(0, { [LeaseAttributes.event]: event });
    this.failures.add(0);
  }

  // ---- public surface ----

  start(signal?: AbortSignal): Promise<void> {
    if (this.releasing !== undefined) {
      return Promise.reject(new LeaseError('released', 'this lease was released; create a new one', false));
    }
    // A failed start (no free slot, aborted) may be tried again; a running or successful one is shared.
    this.starting ??= this.run(signal).catch((e: unknown) => {
      this.starting = undefined;
      throw e;
    });
    return this.starting;
  }

  setAddress(address: string): void {
    this.address = address;
    const s = this.session;
    if (this.wantRegistered && s !== undefined && assigned(s)) {
      void this.putNode(s).catch((e: unknown) =>
        this.cfg.logger.warn({ err: errorText(e) }, 'lease: re-registering the new address failed'),
      );
    }
  }

  async register(): Promise<void> {
    if (this.releasing !== undefined)
      throw new LeaseError('released', 'this lease was released; cannot register', false);
    this.wantRegistered = true;
    const s = this.session;
    if (s !== undefined && assigned(s)) await this.putNode(s);
  }

  release(): Promise<void> {
    this.releasing ??= this.doRelease();
    return this.releasing;
  }

  snapshot(): LeaseSnapshot {
    const s = this.session;
    const live = s !== undefined && !ended(s);
    const slot = live ? slotOf(s) : undefined;
    const mono = this.cfg.clock.monoMs();
    return {
      state: this.state,
      nodeId: this.cfg.nodeId,
      region: slot?.region,
      worker: slot?.worker,
      leaseId: live ? s.leaseId : undefined,
      keepAliveAgeSeconds: live ? (mono - s.lastAckMono) / 1000 : undefined,
      deadlineInMs: live ? s.deadline - mono : undefined,
      floorMs: slot?.floorMs,
      message: this.message,
      mode: 'etcd',
    };
  }

  on(_event: 'state', fn: (s: LeaseSnapshot) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  // ---- life cycle ----

  private setState(state: LeaseState, message: string): void {
    if (this.state === 'released') return;
    this.state = state;
    this.message = message;
    const snap = this.snapshot();
    for (const fn of this.listeners) {
      try {
        fn(snap);
      } catch (e) {
        this.cfg.logger.error({ err: errorText(e) }, 'lease: a state listener threw');
      }
    }
  }

  private count(event: ChurnEvent): void {
    this.churn.add(1, { [LeaseAttributes.event]: event });
  }

  private backoff(attempt: number): number {
    const base = Math.min(this.cfg.backoffMaxMs, this.cfg.backoffInitialMs * 2 ** Math.min(attempt, 20));
    return base / 2 + randomInt(Math.max(1, Math.floor(base / 2)) + 1);
  }

  /**
   * Boot steps 3-5. The first claim fails fast on a non-retryable error, and on a full range unless
   * `waitForFreeSlot` (a spare node waits, not ready, until a slot frees up).
   */
  private async run(signal?: AbortSignal): Promise<void> {
    const abort = (): void => this.lifetime.abort(signal?.reason);
    if (signal?.aborted) abort();
    signal?.addEventListener('abort', abort, { once: true });
    try {
      this.client ??= createEtcdClient(this.cfg);
      const single = this.client;
      this.routes ??= new EndpointRoutes(this.cfg.endpoints, single, (endpoint) =>
        createEtcdClient({ ...this.cfg, endpoints: [endpoint] }),
      );
      this.setState('claiming', 'connecting to etcd and checking the layout record');
      await this.retrying('layout check', () => this.checkLayout());
      await this.retrying('region binding check', () => this.checkBinding());
      await this.retrying('lease TTL ceiling check', () => this.checkCeiling());
      // docs/design.md §7: a code this etcd lent out, or a spare it never adopted, is no home region here.
      await this.retrying('region code check', () =>
        checkRegionCode(this.requireClient(), this.cfg.prefix, this.cfg.region, {
          layout: this.cfg.layout,
          timeoutMs: this.cfg.requestTimeoutMs,
        }),
      );
      await this.acquire(!this.cfg.waitForFreeSlot);
    } catch (e) {
      if (!this.lifetime.signal.aborted || this.releasing === undefined) {
        this.setState('idle', `start failed: ${errorText(e)}`);
      }
      throw e;
    } finally {
      signal?.removeEventListener('abort', abort);
    }
  }

  /** Runs `fn` until it succeeds; retries everything but our own non-retryable errors, with backoff. */
  private async retrying<T>(what: string, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      this.lifetime.signal.throwIfAborted();
      try {
        return await fn();
      } catch (e) {
        // A binding of another cluster waits for the operator's `idgen region restored` (see acquire).
        if (isLeaseError(e) && !e.retryable && !(e instanceof RegionBindingError && e.awaitsOperator)) throw e;
        const access = etcdAccessProblem(e);
        if (access !== undefined) throw new LeaseError('etcd-access', access, false);
        this.lifetime.signal.throwIfAborted();
        const delay = this.backoff(attempt);
        this.cfg.logger.warn(
          { err: errorText(e), attempt, delayMs: Math.round(delay) },
          `lease: ${what} failed; retrying`,
        );
        this.setState(this.state, `${what} failed (${errorText(e)}); retrying in ${Math.round(delay)} ms`);
        await sleep(delay, this.lifetime.signal);
      }
    }
  }

  /**
   * Claims a slot and waits for its floor, retrying until alive. `failFast`: a full range rejects at once.
   * `reclaim`: a holder claiming again after it lost its slot (a binding refusal is then waited out, not final).
   */
  private async acquire(failFast: boolean, reclaim = false): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      this.lifetime.signal.throwIfAborted();
      this.setState(
        'claiming',
        attempt === 0 ? 'claiming a worker slot' : `claiming a worker slot (attempt ${attempt + 1})`,
      );
      try {
        await this.claimAndWait();
        return;
      } catch (e) {
        this.lifetime.signal.throwIfAborted();
        // A restore with a new cluster token gives a binding of another cluster until the operator's `idgen region
        // restored` (docs/runbook.md): a holder keeps asking, unready, rather than stop for good; a running holder's
        // re-claim waits out any binding refusal. Another code or an unbound etcd stops a first claim (exit 2).
        const awaitingOperator =
          isLeaseError(e) &&
          e.code === 'region-binding' &&
          (reclaim || (e instanceof RegionBindingError && e.awaitsOperator));
        if (isLeaseError(e) && (!e.retryable || failFast) && !awaitingOperator) throw e;
        const access = etcdAccessProblem(e);
        if (access !== undefined) throw new LeaseError('etcd-access', access, false);
        const delay = this.backoff(attempt);
        this.cfg.logger.warn(
          { err: errorText(e), attempt, delayMs: Math.round(delay) },
          'lease: claim failed; retrying',
        );
        this.setState('claiming', `claim failed (${errorText(e)}); retrying in ${Math.round(delay)} ms`);
        await sleep(delay, this.lifetime.signal);
      }
    }
  }

  /** Compares `{prefix}/layout` with ours, creating it if absent in one transaction (docs/design.md §5 boot step 3). */
  private async checkLayout(): Promise<void> {
    const client = this.requireClient();
    const key = leaseKeys.layout(this.cfg.prefix);
    const mine = JSON.stringify(this.cfg.layout.toRecord());
    const res = await withTimeout(
      client
        .if(key, 'Create', '==', 0)
        .then(client.put(key).value(mine))
        .else(client.get(key))
        .options(deadlineIn(this.cfg.requestTimeoutMs))
        .commit(),
      this.cfg.requestTimeoutMs,
      'layout transaction',
    );
    if (res.succeeded) {
      this.cfg.logger.info({ key, layout: mine }, 'lease: wrote the layout record (first process of this deployment)');
      return;
    }
    const raw = rangeValue(res.responses[0]);
    if (raw === undefined) throw new Error(`${key} vanished between compare and read`); // retried
    const record = parseLayoutRecord(key, raw);
    const differences = this.cfg.layout.differences(record, 'in this process', 'in etcd');
    if (differences.length > 0) throw new LayoutMismatchError(key, differences);
  }

  /** docs/design.md §5: this etcd must be bound to this region code (idgen region init), in the cluster it answers from. */
  private async checkBinding(): Promise<void> {
    const check = await checkRegionBinding(
      {
        client: this.requireClient(),
        prefix: this.cfg.prefix,
        timeoutMs: this.cfg.requestTimeoutMs,
        layout: this.cfg.layout,
      },
      this.cfg.region,
    );
    this.history.observe({ cluster_id: check.clusterId, revision: check.revision });
  }

  /** docs/design.md §5, "The TTL ceiling": refuses a TTL above the deployment's; holds wait by the ceiling. */
  private async checkCeiling(): Promise<void> {
    const io = { client: this.requireClient(), prefix: this.cfg.prefix, timeoutMs: this.cfg.requestTimeoutMs };
    this.holdTtlMs = Math.max(this.holdTtlMs, await holdTtlMs(io, this.cfg.ttlMs));
  }

  /**
   * etcd's history went back, or this holder's own key or lease went without a release (docs/design.md §5, "a rewound
   * etcd is never trusted"): the records may have lost what holders of the lost history minted, and those holders may
   * still be minting until their own deadline. Every slot is unclean as of now: the next claim's floor is at least now
   * + TTL + the clock bound, whatever `last-ms` says, and the binding is checked again before it.
   */
  private distrust(why: string, from: Session): void {
    const now = this.cfg.clock.nowMs();
    if (this.untrustedSinceWall === undefined || now > this.untrustedSinceWall) this.untrustedSinceWall = now;
    this.history.reset();
    this.cfg.logger.error({ why, untrustedSince: new Date(now).toISOString() }, 'lease: etcd cannot be trusted');
    // Found by an earlier session's late answer: the current session began before the verdict, and is covered by it.
    const current = this.session;
    if (current !== undefined && current !== from && !ended(current)) {
      this.lose(
        current,
        `${why} (an earlier session's answer): fenced, every slot unclean as of now (docs/design.md §5)`,
      );
    }
  }

  /**
   * After a `last-ms` write of session `s`: when its answer (or an earlier one) showed etcd's history going back, the
   * verdict ({@link distrust}) and the slot's loss; else undefined.
   */
  private rewoundLoss(s: Session): SlotLoss | undefined {
    const rewound = this.history.problem;
    if (rewound === undefined) return undefined;
    this.distrust(rewound, s);
    return lost(`${rewound}: fenced, every slot unclean as of now (docs/design.md §5)`);
  }

  /**
   * Refuses session `s` when etcd was found untrustworthy since it began ({@link Session.historyEpoch}): the answers
   * it went on (its claim's, its first records') may be the very ones the verdict was about, and a claim must never
   * stand on a history this holder does not trust (docs/design.md §5).
   */
  private checkTrustedSince(s: Session, while_: string): void {
    if (this.history.epoch === s.historyEpoch) return;
    throw new SessionLostError(
      `etcd was found untrustworthy while ${while_}: no claim on this history; claiming again (docs/design.md §5)`,
    );
  }

  private requireClient(): Etcd3 {
    if (this.client === undefined) throw new Error('etcd client not created');
    return this.client;
  }

  /** The home slots this node may claim, starting at a random one so starters spread out. */
  private candidates(): { region: number; worker: number }[] {
    return rotated(this.cfg.region, this.cfg.workers.first, this.cfg.workers.last);
  }

  /**
   * The spare codes this etcd lends to the home region (docs/design.md §7), for a borrower whose own range is full.
   * Every slot of a lent code is open to borrowers: no node runs on it. Each loan is confirmed in the registry first
   * (./loan-confirmation.ts): a mirror it does not confirm (a dead loan brought back by a restore, or no answer) is
   * named in `refused` and claimed under by no one.
   */
  private async lentCodes(
    refused: string[],
  ): Promise<{ guard: SpareGuard; slots: { region: number; worker: number }[] }[]> {
    const { entries, unreadable } = await readSpareCodesLeniently({
      client: this.requireClient(),
      prefix: this.cfg.prefix,
      timeoutMs: this.cfg.requestTimeoutMs,
      layout: this.cfg.layout,
    });
    for (const u of unreadable) this.cfg.logger.error({ err: u }, 'lease: ignoring an unreadable spare-code record');
    const confirmed: { guard: SpareGuard; slots: { region: number; worker: number }[] }[] = [];
    const registry = this.cfg.registry;
    for (const e of lentTo(entries, this.cfg.region)) {
      if (registry === undefined) break; // borrowSpare requires it (config.ts); no registry, no loan
      this.registryClient ??= createEtcdClient(registry);
      const verdict = await confirmLoan(
        { client: this.registryClient, prefix: registry.prefix, timeoutMs: this.cfg.requestTimeoutMs },
        regionEtcd(this.requireClient(), this.cfg.prefix, this.cfg.requestTimeoutMs),
        e,
        this.cfg.region,
        this.cfg.layout.maxRegion,
      );
      if (verdict.kind !== 'confirmed') {
        refused.push(`spare code ${e.record.code}: loan not confirmed by the registry (${verdict.why})`);
        this.cfg.logger.warn(
          { code: e.record.code, verdict: verdict.kind, why: verdict.why },
          'lease: no claim under a loan the registry does not confirm',
        );
        continue;
      }
      this.loans.set(e.key, e);
      confirmed.push({
        guard: { key: e.key, modRevision: e.modRevision },
        slots: rotated(e.record.code, 0, this.cfg.layout.maxWorker),
      });
    }
    return confirmed;
  }

  /** Grants a lease, claims a slot, writes `last-ms`, waits for the floor, assigns the target. */
  private async claimAndWait(): Promise<void> {
    const client = this.requireClient();
    const { clock, ttlSeconds, ttlMs, fenceMarginMs, requestTimeoutMs } = this.cfg;
    // Taken first: a distrust verdict from here on (the binding check included) refuses this claim.
    const epoch = this.history.epoch;
    // After a rewind, the etcd answering may be a restored one: its binding decides (another cluster ID refuses).
    if (this.untrustedSinceWall !== undefined) await this.checkBinding();
    await this.checkCeiling();

    // Grant. The deadline counts from before the request was sent: etcd's TTL starts later than that.
    const sentMono = clock.monoMs();
    const lease = client.lease(ttlSeconds, { autoKeepAlive: false });
    lease.on('lost', () => undefined); // not used for fencing (docs/toolchain.md); our own deadline decides
    let leaseId: string;
    try {
      leaseId = await withTimeout(lease.grant(), requestTimeoutMs, 'lease grant');
    } catch (e) {
      lease.release();
      throw e;
    }
    const s: Session = {
      lease,
      leaseId,
      abort: new AbortController(),
      phase: { kind: 'claiming' },
      deadline: sentMono + ttlMs - fenceMarginMs,
      lastMsRevision: '0',
      ackedLastMs: -1,
      sentLastMs: -1,
      lastAckMono: sentMono,
      fenceTimer: undefined,
      historyEpoch: epoch,
    };
    this.session = s;
    this.armFence(s);

    try {
      const claimed = await this.claimFreeSlot(s);
      await this.holdAndAssign(s, claimed);
    } catch (e) {
      this.endSession(s);
      void this.revokeQuietly(lease);
      throw e;
    }
  }

  /**
   * Claims a slot on session `s`: one transaction per candidate, create-if-absent, reading last-ms in the same
   * transaction. The home range first; a borrower whose home range is full then tries the spare codes lent to its
   * region (docs/design.md §7). Throws {@link NoFreeWorkerError} when none is free.
   */
  private async claimFreeSlot(s: Session): Promise<ClaimedSlot> {
    const client = this.requireClient();
    const { clock, requestTimeoutMs, prefix, nodeId } = this.cfg;
    const { lease, leaseId } = s;
    const holders: SlotHolder[] = [];
    const refused: string[] = [];
    let claimed: ClaimedSlot | undefined;
    let tried = 0;
    const tryOne = async (
      c: { region: number; worker: number },
      spare?: SpareGuard,
    ): Promise<'next' | 'claimed' | 'withdrawn'> => {
      this.checkSession(s);
      this.lifetime.signal.throwIfAborted(); // released meanwhile: claim nothing more
      tried++;
      const workerKey = leaseKeys.worker(prefix, c.region, c.worker);
      const lastKey = leaseKeys.lastMs(prefix, c.region, c.worker);
      const holder: WorkerRecord = {
        nodeId,
        kind: this.cfg.kind,
        address: this.address,
        startedAt: new Date(clock.nowMs()).toISOString(),
      };
      // A claim without an answer may have committed: ask again on the same lease, which adopts a key bound to it
      // (or claims it now). Giving the lease up instead would leave the key bound to it until etcd hears the revoke,
      // and a retry on a new lease meanwhile would find its own slot held. The session's deadline bounds the asking.
      const askClaim = async (): Promise<ClaimOutcome> => {
        for (let asked = 1; ; asked++) {
          try {
            return await claimSlot(
              client,
              lease,
              leaseId,
              { worker: workerKey, lastMs: lastKey },
              JSON.stringify(holder),
              requestTimeoutMs,
              spare,
              this.history,
            );
          } catch (e) {
            if (!outcomeUnknown(e)) throw e;
            this.checkSession(s);
            this.lifetime.signal.throwIfAborted();
            this.cfg.logger.warn(
              { key: workerKey, leaseId, asked, err: errorText(e) },
              'lease: no answer to the claim; asking again on the same lease',
            );
            await sleep(this.backoff(asked - 1), this.lifetime.signal);
          }
        }
      };
      const outcome = await askClaim();
      const rewound = this.history.problem;
      if (rewound !== undefined) {
        this.distrust(rewound, s);
        throw new SessionLostError(`${rewound}: no claim on this history (docs/design.md §5)`);
      }
      this.checkTrustedSince(s, 'the claim was out');
      if (outcome.kind === 'withdrawn') {
        refused.push(`spare code ${c.region}: no longer lent (its record changed)`);
        return 'withdrawn';
      }
      if (outcome.kind === 'held') {
        holders.push({ region: c.region, worker: c.worker, holder: describeWorkerHolder(outcome.holder) });
        return 'next';
      }
      if (outcome.kind === 'adopted') {
        this.cfg.logger.warn(
          { key: workerKey, leaseId },
          'lease: adopted a worker key our own lease already held (a claim whose answer was lost)',
        );
      }
      const last = outcome.lastMs;
      try {
        claimed = {
          ...c,
          last: last === undefined ? undefined : parseLastMsRecord(lastKey, last.value),
          revision: outcome.revision,
          ...(spare === undefined ? {} : { spare }),
        };
        s.lastMsRevision = last?.modRevision ?? '0';
        return 'claimed';
      } catch (e) {
        // Garbage in last-ms: the floor is unknown, so this slot is refused (never guess a floor lower
        // than the truth); give the worker key back and try the next candidate.
        const why = errorText(e);
        refused.push(`${c.region}/${c.worker}: ${e instanceof CorruptRecordError ? e.message : why}`);
        this.cfg.logger.error({ key: lastKey, err: why }, 'lease: refusing a slot whose last-ms is unreadable');
        await withTimeout(
          client
            .if(workerKey, 'Lease', '==', leaseId)
            .then(client.delete().key(workerKey))
            .options(deadlineIn(requestTimeoutMs))
            .commit(),
          requestTimeoutMs,
          `giving back ${workerKey}`,
        );
        return 'next';
      }
    };
    for (const c of this.candidates()) {
      if ((await tryOne(c)) === 'claimed') break;
    }
    if (claimed === undefined && this.cfg.borrowSpare) {
      lent: for (const code of await this.lentCodes(refused)) {
        for (const c of code.slots) {
          const r = await tryOne(c, code.guard);
          if (r === 'claimed') break lent;
          if (r === 'withdrawn') break;
        }
      }
    }
    if (claimed === undefined) throw new NoFreeWorkerError(tried, holders, refused);
    return claimed;
  }

  /**
   * Holds the claimed slot until its floor (last-ms and the tenure written first, keep-alives running), then assigns
   * it to the target and registers the node (docs/design.md §5).
   */
  private async holdAndAssign(s: Session, claimed: ClaimedSlot): Promise<void> {
    const { clock, ttlMs, requestTimeoutMs, prefix } = this.cfg;
    const { leaseId } = s;
    // The session may have ended while the claim was out (fenced at its deadline, or released): its end has
    // cancelled its watch already, so a watch made now would never be cancelled, and etcd3 would try to
    // reconnect it for ever after the client closes, keeping the process alive after release().
    this.checkSession(s);
    this.lifetime.signal.throwIfAborted();
    // Watched only once the slot is ours for good: a slot given back above (garbage in last-ms) is not.
    this.watchWorkerKey(s, leaseKeys.worker(prefix, claimed.region, claimed.worker), claimed.revision);
    // The binding again, read after the claim committed (docs/design.md §5, "One live cluster per code"): a retire's
    // sweep of worker keys either came after the claim (the watch above sees the key deleted and fences) or the retire
    // came before this read, which then refuses the claim before its first mint.
    await this.checkBinding();

    const recordFloor = computeFloor(claimed.last, {
      ttlMs,
      clockBoundMs: this.cfg.clockBoundMs,
      epochMs: this.cfg.layout.epochMs,
    });
    // After etcd stopped being trustworthy, no record is: start above that moment + TTL + bound (docs/design.md §5).
    const untrusted = this.untrustedSinceWall;
    // Both holds cover a holder no record shows, so they wait by the deployment's TTL ceiling (§5, "The TTL ceiling").
    const untrustedFloor = untrusted === undefined ? recordFloor : untrusted + this.holdTtlMs + this.cfg.clockBoundMs;
    // The start hold: no first mint before the claim's answer + the ceiling + bound, whatever the records say (§5).
    const hold = startHoldFloor(clock.nowMs(), claimed.last, this.holdTtlMs, this.cfg.clockBoundMs);
    const floorMs = Math.max(recordFloor, untrustedFloor, hold);
    const slot: SessionSlot = {
      region: claimed.region,
      worker: claimed.worker,
      floorMs,
      ...(claimed.spare === undefined ? {} : { spare: claimed.spare }),
    };
    s.phase = { kind: 'holding', slot };

    // last-ms and the tenure before the first mint, in one transaction: a crash from here on makes the next holder
    // wait as for an unclean end, and the audit finds the tenure that allowed the record (docs/design.md §5).
    const written = await this.writeFirstRecords(s, slot, claimed.last, requestTimeoutMs);
    if (written !== undefined) throw new SessionLostError(`right after the claim: ${written.why}`);
    // The tenure witnessed outside etcd before the first mint (tenure-witness.ts): a claim it cannot record is given up.
    await this.cfg.tenureWitness?.opened(this.witnessed(s)).catch((e: unknown) => {
      throw new SessionLostError(`right after the claim: the tenure witness could not be written: ${errorText(e)}`);
    });
    s.loop = this.keepAliveLoop(s);

    const wait = floorMs - clock.nowMs();
    this.setState(
      'waiting-for-floor',
      `holding ${claimed.region}/${claimed.worker}; ` +
        (claimed.last === undefined
          ? 'never used before'
          : claimed.last.released
            ? `released cleanly at ${claimed.last.ms}`
            : `previous holder ended uncleanly (last-ms ${claimed.last.ms})`) +
        (wait >= 0 ? `: waiting until the clock passes ${floorMs} (${wait + 1} ms)` : '') +
        (floorMs === hold ? ' (the start hold)' : ''),
    );
    await this.waitForFloor(s, floorMs);

    this.checkSession(s);
    this.lifetime.signal.throwIfAborted();
    this.checkTrustedSince(s, 'the slot was held for its floor');
    if (clock.monoMs() >= s.deadline) throw new SessionLostError('the fence deadline passed before the floor');
    this.target.assign({
      region: claimed.region,
      worker: claimed.worker,
      floorMs,
      deadlineMonoMs: s.deadline,
      ceilingMs: this.ceilingOf(s),
    });
    s.phase = { kind: 'assigned', slot };
    this.count(LeaseAttributes.acquired);
    this.setState('alive', `holding worker ${claimed.worker} of region ${claimed.region}; minting above ${floorMs}`);
    this.cfg.logger.info({ region: claimed.region, worker: claimed.worker, floorMs, leaseId }, 'lease: alive');
    if (this.wantRegistered) {
      void this.putNode(s).catch((e: unknown) =>
        this.cfg.logger.warn({ err: errorText(e) }, 'lease: registering in discovery failed'),
      );
    }
  }

  /**
   * The claim's first records, before the first mint (docs/design.md §5): the first `last-ms` and this session's
   * tenure, open, in the slot's tenure record (closing a predecessor's left open), in ONE transaction comparing the
   * worker key's lease, `last-ms`'s and the record's mod revisions (and a borrowed code's spare record): both land or
   * neither. Written apart, a holder that died between the two left a `last-ms` no tenure allowed, which the audit
   * cannot tell from a holder that minted without a tenure. `undefined` once written, else why the slot is not ours
   * ({@link SlotLoss}). A tenure record that is unreadable (left for an operator: the audit reports it), keeps
   * changing under us (someone else's hand: logged, never fenced for, it is an audit record), or already holds this
   * tenure, cannot be joined: `last-ms` is then written on its own, as every refresh is ({@link writeLastMs}).
   */
  private async writeFirstRecords(
    s: Session,
    slot: SessionSlot,
    last: LastMsRecord | undefined,
    timeoutMs: number,
  ): Promise<SlotLoss | undefined> {
    const { clock, prefix } = this.cfg;
    const startMono = clock.monoMs();
    const now = clock.nowMs();
    const iso = new Date(now).toISOString();
    const mine: Tenure = {
      code: slot.region,
      worker: slot.worker,
      kind: this.cfg.kind,
      nodeId: this.cfg.nodeId,
      leaseId: s.leaseId,
      firstMs: slot.floorMs + 1,
      lastMs: null,
      end: 'open',
      startedAt: iso,
    };
    s.tenure = mine;
    const record = this.nextLastMs(s, slot, false);
    const lastKey = leaseKeys.lastMs(prefix, slot.region, slot.worker);
    const outcome = await this.updateTenure(s, (r) => openTenure(r, mine, last, this.cfg.ttlMs, iso), {
      key: lastKey,
      expectedRevision: s.lastMsRevision,
      value: JSON.stringify(record),
      ...(slot.spare === undefined ? {} : { guard: slot.spare }),
    });
    const rewound = this.rewoundLoss(s);
    if (rewound !== undefined) return rewound;
    if (outcome === 'not-held') return lost('the worker key is no longer held by this lease');
    if (outcome === 'joined-withdrawn') {
      return {
        kind: 'withdrawn',
        why: `spare code ${slot.region} is being reclaimed (${slot.spare?.key} changed): the borrowed slot ${slot.region}/${slot.worker} is given back`,
      };
    }
    if (outcome === 'written' && s.tenureRevision !== undefined) {
      // One transaction: `last-ms`'s mod revision is the record's.
      s.lastMsRevision = s.tenureRevision;
      s.ackedLastMs = Math.max(s.ackedLastMs, record.ms);
      return undefined;
    }
    // Not joined (see above); a `last-ms` not at the revision the claim read is judged as every write judges it.
    return this.writeLastMs(s, false, Math.max(1, timeoutMs - (clock.monoMs() - startMono)));
  }

  /** This session's tenure as its witness records it (tenure-witness.ts): the tenure, the TTL, the acked `last-ms`. */
  private witnessed(s: Session, tenure: Tenure | undefined = s.tenure): TenureWitnessRecord {
    if (tenure === undefined) throw new Error('no tenure to witness');
    return {
      tenure,
      ttlMs: this.cfg.ttlMs,
      lastMs: s.ackedLastMs,
      etcd: this.cfg.endpoints.join(','),
      updatedAt: new Date(this.cfg.clock.nowMs()).toISOString(),
    };
  }

  /**
   * Closes this session's tenure as `end` with `lastMs` (tenure-ledger.ts); best effort, never thrown: a tenure left
   * open is closed by the next holder as `expired`, with the bound of what it may have minted.
   */
  private async recordTenureEnd(s: Session, end: Exclude<TenureEnd, 'open'>, lastMs: number): Promise<void> {
    const mine = s.tenure;
    if (mine === undefined) return;
    const iso = new Date(this.cfg.clock.nowMs()).toISOString();
    try {
      const closed: Tenure = { ...mine, lastMs: Math.max(lastMs, mine.firstMs - 1), end, endedAt: iso };
      await this.cfg.tenureWitness?.closed(this.witnessed(s, closed));
      const outcome = await this.updateTenure(s, (r) => closeTenure(r, mine, end, lastMs, iso));
      if (outcome === 'not-held')
        this.cfg.logger.warn({ end }, 'lease: tenure not closed: the worker key is gone (the next holder closes it)');
    } catch (e) {
      this.cfg.logger.warn(
        { err: errorText(e), end },
        'lease: closing the tenure record failed (the next holder does)',
      );
    }
  }

  /**
   * Updates this session's tenure record (tenure-ledger.ts's updateTenureRecord), with `joined` in the same
   * transaction if given: `written` (the record changed, `joined` with it), `not-held`, `joined-moved` and
   * `joined-withdrawn` (nothing written), or `left` (nothing needed writing, or the record is unreadable or kept
   * changing: logged; nothing written, `joined` included).
   */
  private async updateTenure(
    s: Session,
    update: Parameters<typeof updateTenureRecord>[3],
    joined?: JoinedWrite,
  ): Promise<'written' | 'not-held' | 'left' | 'joined-moved' | 'joined-withdrawn'> {
    const { prefix, requestTimeoutMs } = this.cfg;
    const slot = slotOf(s);
    if (slot === undefined) return 'not-held';
    const { region, worker } = slot;
    const keys = { worker: leaseKeys.worker(prefix, region, worker), tenures: tenureKey(prefix, region, worker) };
    const outcome = await updateTenureRecord(this.requireClient(), s.leaseId, keys, update, requestTimeoutMs, {
      ...(s.tenureRevision === undefined ? {} : { lastWritten: s.tenureRevision }),
      ...(joined === undefined ? {} : { joined, history: this.history }),
      onForeign: (found) =>
        this.cfg.logger.error(
          { key: keys.tenures, found: found?.value.slice(0, 200) ?? 'deleted' },
          'lease: the tenure record changed under a key this holder holds, not by a write of its own (not fenced: it is an audit record; idgen audit reports it)',
        ),
    });
    if (outcome.kind === 'not-held' || outcome.kind === 'joined-moved' || outcome.kind === 'joined-withdrawn')
      return outcome.kind;
    if (outcome.kind === 'unchanged' && joined !== undefined) return 'left';
    if (outcome.kind === 'unreadable') {
      this.cfg.logger.error(
        { key: keys.tenures, err: outcome.problem },
        'lease: the tenure record is unreadable; left as it is',
      );
      return 'left';
    }
    if (outcome.kind === 'contended') {
      this.cfg.logger.error(
        { key: keys.tenures, found: outcome.foreign },
        'lease: the tenure record kept changing; left as it is',
      );
      return 'left';
    }
    // Unknown after a late write of ours was found (no revision): the next update then checks nothing.
    if (outcome.kind === 'written' && outcome.revision !== undefined) s.tenureRevision = outcome.revision;
    else delete s.tenureRevision;
    return 'written';
  }

  /**
   * Watches this session's own worker key from just after the claim: deleted or overwritten by anyone (an
   * operator's etcdctl, a forged release), the holder fences at once instead of at its next refresh (docs/design.md §5,
   * root of trust). The lease's own end (expiry, revoke) deletes it too; by then the session has ended.
   */
  private watchWorkerKey(s: Session, key: string, claimRevision: string): void {
    const from = (BigInt(claimRevision) + 1n).toString();
    // watcher(), not create(): the Watcher exists at once, so the session's end can always cancel it, even while
    // it is still connecting. One never cancelled keeps etcd3's watch manager reconnecting on timers for ever,
    // and the process alive after the client is closed.
    const w = this.requireClient().watch().key(key).startRevision(from).watcher();
    s.watcher = w;
    const changed = (what: string) => (): void => {
      if (ended(s)) return;
      this.distrust(`the worker key ${key} was ${what} under this holder`, s);
      this.lose(
        s,
        `the worker key ${key} was ${what} under this holder: fenced at once (docs/design.md §5, root of trust)`,
      );
    };
    w.on('delete', changed('deleted'));
    w.on('put', changed('overwritten'));
    w.on('error', (e) =>
      this.cfg.logger.warn({ err: errorText(e), key }, 'lease: the watch on the worker key failed; it reconnects'),
    );
  }

  private checkSession(s: Session): void {
    if (ended(s)) throw new SessionLostError('the lease was lost while claiming');
  }

  /** Waits until the wall clock passes `floorMs` (docs/design.md §5: never mint at or below it). */
  private async waitForFloor(s: Session, floorMs: number): Promise<void> {
    for (;;) {
      this.checkSession(s);
      const now = this.cfg.clock.nowMs();
      if (now > floorMs) return;
      try {
        await sleep(Math.min(floorMs - now + 1, 1000), s.abort.signal);
      } catch {
        this.checkSession(s);
      }
    }
  }

  /** The wall ceiling of a session (docs/design.md §5): its last acknowledged `last-ms` + TTL − margin. */
  private ceilingOf(s: Session): number {
    return s.ackedLastMs < 0 ? Number.NEGATIVE_INFINITY : s.ackedLastMs + this.cfg.ttlMs - this.cfg.fenceMarginMs;
  }

  /**
   * The `last-ms` record to send now: at least the clock, the floor, the last minted millisecond and every value
   * acknowledged before (counted as sent).
   */
  private nextLastMs(s: Session, slot: SessionSlot, released: boolean): LastMsRecord {
    const now = this.cfg.clock.nowMs();
    const ms = Math.max(now, slot.floorMs, this.target.lastMintedMs(), s.ackedLastMs);
    s.sentLastMs = Math.max(s.sentLastMs, ms);
    return {
      ms,
      released,
      nodeId: this.cfg.nodeId,
      leaseId: s.leaseId,
      at: new Date(now).toISOString(),
      ttlMs: this.cfg.ttlMs,
    };
  }

  /**
   * Writes `last-ms`; `undefined` when etcd acknowledged it, else why the slot is not ours any more ({@link SlotLoss}).
   *
   * The value is at least the clock now, the floor, the last minted millisecond and every value written
   * before: `last-ms` never goes down, so the ceiling taken from it never has to. The write lands only if
   * this session still holds the worker key *and* `last-ms` is still the record this session last wrote (its
   * mod revision, docs/design.md §5): a write the node gave up on (a client-side timeout) cannot land later, after a
   * newer one or after the final released record. If it did land before the newer one, the newer one finds
   * it, adopts its revision (it is ours: our node, our lease, a value we sent) and writes again. A record we
   * did not write, under a key we hold, is a forgery or an operator's hand: the slot cannot be trusted.
   */
  private async writeLastMs(
    s: Session,
    released: boolean,
    timeoutMs: number,
    client: Etcd3 = this.requireClient(),
  ): Promise<SlotLoss | undefined> {
    const slot = slotOf(s);
    if (slot === undefined) return lost('no slot claimed');
    const workerKey = leaseKeys.worker(this.cfg.prefix, slot.region, slot.worker);
    const lastKey = leaseKeys.lastMs(this.cfg.prefix, slot.region, slot.worker);
    const { clock } = this.cfg;
    const startMono = clock.monoMs();
    for (let attempt = 0; attempt < 2; attempt++) {
      const record = this.nextLastMs(s, slot, released);
      const { ms } = record;
      const left = timeoutMs - (clock.monoMs() - startMono);
      const keys = { worker: workerKey, lastMs: lastKey };
      // A borrowed slot's refreshes compare its spare record (docs/design.md §7); the final released record does not.
      const outcome = await writeLastMsRecord(
        client,
        s.leaseId,
        keys,
        s.lastMsRevision,
        record,
        left,
        released ? undefined : slot.spare,
        this.history,
      );
      const rewound = this.rewoundLoss(s);
      if (rewound !== undefined) return rewound;
      if (outcome.kind === 'withdrawn') {
        return {
          kind: 'withdrawn',
          why: `spare code ${slot.region} is being reclaimed (${slot.spare?.key} changed): the borrowed slot ${slot.region}/${slot.worker} is given back`,
        };
      }
      if (outcome.kind === 'written') {
        s.lastMsRevision = outcome.revision;
        s.ackedLastMs = Math.max(s.ackedLastMs, ms);
        if (s.tenure?.end === 'open') this.cfg.tenureWitness?.refreshed(this.witnessed(s));
        return undefined;
      }
      if (outcome.kind === 'not-held') return lost('the worker key is no longer held by this lease');
      const own = isOwnLateWrite(lastKey, outcome.found, {
        nodeId: this.cfg.nodeId,
        leaseId: s.leaseId,
        highestSentMs: s.sentLastMs,
      });
      if (own === undefined || outcome.found === undefined) {
        const what = outcome.found === undefined ? 'deleted' : JSON.stringify(outcome.found.value.slice(0, 120));
        return lost(
          `${lastKey} was changed under this holder (${what}), not by a write of its own: fenced (docs/design.md §5, root of trust)`,
        );
      }
      this.cfg.logger.warn(
        { key: lastKey, ms: own.ms },
        'lease: a last-ms write given up on had landed; adopting it and writing again',
      );
      s.lastMsRevision = outcome.found.modRevision;
      s.ackedLastMs = Math.max(s.ackedLastMs, own.ms);
    }
    return lost(`${lastKey} kept changing under this holder`);
  }

  /**
   * Keep-alive on our own loop (not the client's: its `lost` event can come a whole TTL after etcd expired the
   * lease, docs/toolchain.md). Each keep-alive's send time is taken before sending; after the ack and the `last-ms`
   * refresh, the deadline moves to send time + TTL − margin (docs/design.md §5). Failures are counted and retried; the
   * deadline alone decides when minting stops.
   */
  private async keepAliveLoop(s: Session): Promise<void> {
    const { keepAliveIntervalMs } = this.cfg;
    const routes = this.routes as EndpointRoutes;
    while (!ended(s)) {
      try {
        await sleep(keepAliveIntervalMs, s.abort.signal);
      } catch {
        return;
      }
      // One member down, paused or slow costs no fence (docs/design.md §5): a refresh that failed on one endpoint is
      // asked again at once of the next, each endpoint once, before the loop goes back to its interval.
      for (let tried = 0; tried < routes.size && !ended(s); tried++) {
        const outcome = await this.refreshOnce(s, routes.current());
        if (outcome !== 'failed') break;
      }
      this.confirmHeldLoan(s);
    }
  }

  /**
   * A holder of a borrowed slot asks the registry again, every half TTL, whether its loan still stands
   * (docs/design.md §7, "Registry threats"): a registry that shows the code reclaimed, adopted or lent elsewhere (the
   * loan moved on without this etcd's mirror: a registry restored and a second lend) takes the slot back at once. No
   * answer keeps the slot: the registry refuses a second lend of a code it records lent, and a restored registry is
   * refused for lend until it is reconciled (./registry-guard.ts). Runs beside the keep-alives, never delaying them.
   */
  private confirmHeldLoan(s: Session): void {
    const registry = this.cfg.registry;
    const spare = slotOf(s)?.spare;
    if (registry === undefined || spare === undefined || this.registryClient === undefined || ended(s)) return;
    const now = this.cfg.clock.monoMs();
    if (now - this.loanCheckedMono < this.cfg.ttlMs / 2) return;
    this.loanCheckedMono = now;
    const entry = this.loans.get(spare.key);
    if (entry === undefined) return;
    void confirmLoan(
      { client: this.registryClient, prefix: registry.prefix, timeoutMs: this.cfg.requestTimeoutMs },
      regionEtcd(this.requireClient(), this.cfg.prefix, this.cfg.requestTimeoutMs),
      entry,
      this.cfg.region,
      this.cfg.layout.maxRegion,
    ).then((verdict) => {
      if (verdict.kind === 'dropped' && !ended(s))
        this.giveBack(
          s,
          `spare code ${entry.record.code}: the loan moved on (${verdict.why}): the borrowed slot is given back`,
        );
    });
  }

  /**
   * One keep-alive and `last-ms` refresh through `client`: `done` (acknowledged, the deadline moved), `ended` (the
   * session ended, lost or released), or `failed` (this member did not answer in time: the route moves on).
   */
  private async refreshOnce(s: Session, client: Etcd3): Promise<'done' | 'ended' | 'failed'> {
    const { keepAliveTimeoutMs, ttlMs, fenceMarginMs, clock } = this.cfg;
    const routes = this.routes as EndpointRoutes;
    const sentMono = clock.monoMs();
    const left = (): number => keepAliveTimeoutMs - (clock.monoMs() - sentMono);
    try {
      const header = await withTimeout(
        keepAliveOnce(client, s.leaseId, keepAliveTimeoutMs),
        keepAliveTimeoutMs,
        'keep-alive',
      );
      const rewound = this.history.observe(header);
      if (rewound !== undefined) {
        this.distrust(rewound, s);
        this.lose(s, `${rewound}: fenced, every slot unclean as of now (docs/design.md §5)`);
        return 'ended';
      }
    } catch (e) {
      if (ended(s)) return 'ended';
      if (e instanceof EtcdLeaseInvalidError) {
        // Gone without a release: a lease etcd expired, or one a restored etcd never had.
        this.distrust(`etcd says lease ${s.leaseId} is gone`, s);
        this.lose(s, `etcd says lease ${s.leaseId} has expired`);
        return 'ended';
      }
      routes.failed(client);
      this.keepAliveFailed(s, e);
      return 'failed';
    }
    if (ended(s)) return 'ended'; // released (or lost) while the keep-alive was out: no refresh after the final record
    try {
      if (left() <= 0) throw new Error('no time left for the last-ms refresh');
      const loss = await this.writeLastMs(s, false, left(), client);
      if (loss !== undefined) {
        if (loss.kind === 'withdrawn') this.giveBack(s, loss.why);
        else this.lose(s, loss.why);
        return 'ended';
      }
    } catch (e) {
      if (ended(s)) return 'ended';
      routes.failed(client);
      this.keepAliveFailed(s, e);
      return 'failed';
    }
    if (ended(s)) return 'ended';
    s.lastAckMono = clock.monoMs();
    this.extend(s, sentMono + ttlMs - fenceMarginMs);
    return 'done';
  }

  private keepAliveFailed(s: Session, e: unknown): void {
    this.failures.add(1);
    const inMs = Math.round(s.deadline - this.cfg.clock.monoMs());
    this.cfg.logger.warn({ err: errorText(e), deadlineInMs: inMs, leaseId: s.leaseId }, 'lease: keep-alive failed');
  }

  /** Both limits move after an acknowledged keep-alive and `last-ms` refresh: the deadline and the wall ceiling. */
  private extend(s: Session, deadline: number): void {
    if (deadline > s.deadline) s.deadline = deadline;
    if (assigned(s)) this.target.extend({ deadlineMonoMs: s.deadline, ceilingMs: this.ceilingOf(s) });
    this.armFence(s);
  }

  /** Schedules the fence at the deadline (the guard also refuses past it on its own). */
  private armFence(s: Session): void {
    clearTimeout(s.fenceTimer);
    if (ended(s)) return;
    const delay = s.deadline - this.cfg.clock.monoMs();
    s.fenceTimer = setTimeout(
      () => {
        if (ended(s)) return;
        if (this.cfg.clock.monoMs() >= s.deadline) {
          this.lose(
            s,
            `no keep-alive acknowledged in time: fenced at the deadline (TTL ${this.cfg.ttlMs} ms − margin ${this.cfg.fenceMarginMs} ms), before etcd could expire the lease`,
          );
        } else {
          this.armFence(s);
        }
      },
      Math.max(0, delay),
    );
  }

  /** Lease lost or expired: fence at once, count churn, give the lease up, and claim again (docs/design.md §5). */
  private lose(s: Session, why: string): void {
    if (ended(s)) return;
    const wasAssigned = assigned(s);
    this.endSession(s);
    if (wasAssigned) {
      this.target.unassign('lease', why);
      this.count(LeaseAttributes.lost);
    }
    const slot = slotOf(s);
    this.cfg.logger.warn({ region: slot?.region, worker: slot?.worker, leaseId: s.leaseId, why }, 'lease: fenced');
    this.setState('fenced', why);
    // Minting stopped above: the last minted millisecond is the tenure's exact end. Closed before the revoke (the write
    // compares the worker key's lease); a key already gone leaves it to the next holder, which closes it `expired`.
    const lastMinted = this.target.lastMintedMs();
    void (async () => {
      if (wasAssigned && this.client !== undefined) await this.recordTenureEnd(s, 'fenced', lastMinted);
      await this.revokeQuietly(s.lease);
    })();
    // A loss while claiming is handled by the claim loop (claimAndWait rejects); a loss while alive re-claims here.
    if (wasAssigned && this.releasing === undefined && !this.lifetime.signal.aborted) {
      this.reclaiming = this.acquire(false, true).catch((e: unknown) => {
        if (!this.lifetime.signal.aborted) this.cfg.logger.error({ err: errorText(e) }, 'lease: re-claiming stopped');
      });
    }
  }

  /**
   * A borrowed slot whose spare code is being reclaimed (docs/design.md §7): stop minting, write the final `last-ms`
   * marked released (so the handover can start right above it), revoke, and claim again (the home range, or another
   * lent code). Safety does not rest on this: the reclaim waits for the worker key to go, released or expired.
   */
  private giveBack(s: Session, why: string): void {
    if (ended(s)) return;
    const wasAssigned = assigned(s);
    this.endSession(s);
    if (wasAssigned) this.target.unassign('lease', why);
    const slot = slotOf(s);
    this.cfg.logger.warn(
      { region: slot?.region, worker: slot?.worker, leaseId: s.leaseId, why },
      'lease: giving a borrowed slot back',
    );
    this.setState('fenced', why);
    this.reclaiming = (async () => {
      try {
        const loss = await this.writeLastMs(s, true, this.cfg.requestTimeoutMs);
        if (loss === undefined) {
          this.count(LeaseAttributes.released);
          await this.recordTenureEnd(s, 'reclaimed', s.ackedLastMs);
        } else
          this.cfg.logger.warn(
            { why: loss.why },
            'lease: final last-ms of the borrowed slot not written (the handover waits as after a crash)',
          );
      } catch (e) {
        this.cfg.logger.warn(
          { err: errorText(e) },
          'lease: final last-ms of the borrowed slot failed (the handover waits as after a crash)',
        );
      }
      await this.revokeQuietly(s.lease);
      // A slot given back while claiming is handled by the claim loop; one given back while alive claims again here.
      if (wasAssigned && this.releasing === undefined && !this.lifetime.signal.aborted) await this.acquire(false, true);
    })().catch((e: unknown) => {
      if (!this.lifetime.signal.aborted) this.cfg.logger.error({ err: errorText(e) }, 'lease: re-claiming stopped');
    });
  }

  private endSession(s: Session): void {
    if (ended(s)) return;
    s.phase = { kind: 'ended', slot: slotOf(s) };
    clearTimeout(s.fenceTimer);
    const w = s.watcher;
    s.watcher = undefined;
    if (w !== undefined) this.watchCancels.add(w.cancel().catch(() => undefined));
    s.abort.abort(new SessionLostError('session ended'));
  }

  private async revokeQuietly(lease: Lease): Promise<void> {
    try {
      await withTimeout(lease.revoke(deadlineIn(this.cfg.requestTimeoutMs)), this.cfg.requestTimeoutMs, 'revoke');
    } catch (e) {
      this.cfg.logger.warn({ err: errorText(e) }, 'lease: revoking a lost lease failed (etcd will expire it)');
    }
  }

  private async putNode(s: Session): Promise<void> {
    const slot = slotOf(s);
    if (slot === undefined) return;
    const key = leaseKeys.node(this.cfg.prefix, slot.region, this.cfg.nodeId);
    const value = {
      nodeId: this.cfg.nodeId,
      region: slot.region,
      worker: slot.worker,
      address: this.address,
      startedAt: new Date(this.cfg.clock.nowMs()).toISOString(),
    };
    await withTimeout(
      s.lease.put(key).value(JSON.stringify(value)).options(deadlineIn(this.cfg.requestTimeoutMs)).exec(),
      this.cfg.requestTimeoutMs,
      `register ${key}`,
    );
  }

  /** Shutdown (docs/design.md §5): stop minting, deregister, final last-ms marked released, revoke. */
  private async doRelease(): Promise<void> {
    this.lifetime.abort(new LeaseError('released', 'the lease was released', false));
    this.target.unassign('draining', 'worker lease released (shutting down)');
    const s = this.session;
    const timeout = this.cfg.requestTimeoutMs;
    try {
      if (s !== undefined && !ended(s)) {
        const slot = slotOf(s);
        this.endSession(s);
        if (slot !== undefined && this.client !== undefined) {
          const client = this.client;
          const nodeKey = leaseKeys.node(this.cfg.prefix, slot.region, this.cfg.nodeId);
          try {
            await withTimeout(
              client
                .if(nodeKey, 'Lease', '==', s.leaseId)
                .then(client.delete().key(nodeKey))
                .options(deadlineIn(timeout))
                .commit(),
              timeout,
              'deregister',
            );
          } catch (e) {
            this.cfg.logger.warn({ err: errorText(e) }, 'lease: deregistering failed (the key goes with the lease)');
          }
          try {
            // A refresh the keep-alive loop had in flight (released: false) must not land after the final record:
            // wait for the loop (ended above, its requests bounded by their timeouts) before writing it.
            await s.loop?.catch(() => undefined);
            // Minting stopped above, so lastMintedMs() is final: the next holder may start right above it.
            const loss = await this.writeLastMs(s, true, timeout);
            if (loss !== undefined)
              this.cfg.logger.warn({ why: loss.why }, 'lease: final last-ms not written; left as it was');
            // The tenure closes at the final released millisecond (the next holder may start right above it).
            else await this.recordTenureEnd(s, 'released', s.ackedLastMs);
          } catch (e) {
            this.cfg.logger.warn(
              { err: errorText(e) },
              'lease: final last-ms write failed (the next holder waits as after a crash)',
            );
          }
          this.count(LeaseAttributes.released);
        }
        await this.revokeQuietly(s.lease);
      }
      await this.starting?.catch(() => undefined);
      await this.reclaiming;
      // Watches cancelled before the client closes (bounded: a cancel waits for etcd's answer).
      await withTimeout(Promise.all(this.watchCancels), timeout, 'cancelling the watch').catch(() => undefined);
    } finally {
      this.setState('released', 'released');
      this.state = 'released';
      this.age.removeCallback(this.observeAge);
      this.routes?.close();
      this.client?.close();
      this.registryClient?.close();
    }
  }
}

/** The workers first … last of `region`, starting at a random one so starters spread out. */
function rotated(region: number, first: number, last: number): { region: number; worker: number }[] {
  const all: { region: number; worker: number }[] = [];
  for (let w = first; w <= last; w++) all.push({ region, worker: w });
  const start = randomInt(all.length);
  return [...all.slice(start), ...all.slice(0, start)];
}

/**
 * The start hold (docs/design.md §5, "a claim never trusts the restored records"): the floor of a claim answered at
 * wall `claimedAtMs`. If etcd was restored from a snapshot before that answer, a holder of the lost history (the slot
 * claimed after the snapshot, its lease and `last-ms` gone with it) got its last keep-alive acknowledged before it,
 * so it mints nothing above that ack + TTL − margin: below this floor, even with the clocks `clockBoundMs` apart. The
 * restored records cannot say so, a clean release on record included (it may predate the lost claim), and a holder's
 * memory of the history has gaps (a partition), so every claim holds: one TTL (the longer of this node's and the
 * slot record's) + the bound.
 */
export function startHoldFloor(
  claimedAtMs: number,
  last: LastMsRecord | undefined,
  ttlMs: number,
  clockBoundMs: number,
): number {
  return claimedAtMs + Math.max(ttlMs, last?.ttlMs ?? 0) + clockBoundMs;
}
