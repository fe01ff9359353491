import { randomInt } from 'node:crypto';
import { metrics } from '@opentelemetry/api';
import type { Meter } from '@opentelemetry/api';
import type { Etcd3 } from 'etcd3';
import { BootChecks, etcdAccessProblem } from './boot-checks.js';
import { resolveLeaseConfig } from './config.js';
import type { EtcdLeaseOptions, LeaseConfig } from './config.js';
import { createEtcdClient, errorText, sleep, withTimeout } from './etcd-client.js';
import { EndpointRoutes } from './endpoint-routes.js';
import { EtcdHistory } from './etcd-history.js';
import { LeaseError, isLeaseError } from './errors.js';
import {
  SessionLostError,
  assigned,
  checkSession,
  checkTrustedSince,
  endSession,
  ended,
  newSession,
  revokeQuietly,
  slotOf,
} from './lease-session.js';
import type { ClaimedSlot, LeaseHost, Session, SessionSlot } from './lease-session.js';
import { LeaseInstruments } from './lease-instruments.js';
import { LeaseAttributes } from './metrics.js';
import type { ChurnEvent } from './metrics.js';
import { NodeRegistration } from './node-registration.js';
import { leaseKeys } from './records.js';
import { RegionBindingError } from './region-binding.js';
import { SessionKeeper } from './session-keeper.js';
import { TtlCeilingError } from './ttl-ceiling.js';
import { SlotClaimer } from './slot-claimer.js';
import { claimFloor, holdingMessage } from './slot-floor.js';
import { SlotRecords } from './slot-records.js';
import type { LeaseSnapshot, LeaseState, LeaseTarget, WorkerLease } from './types.js';

// The etcd lease is a lifecycle (this file) with collaborators, each a room of its own (issue 32): the boot checks
// (boot-checks.ts), the slot claims (slot-claimer.ts), the floor and the start hold (slot-floor.ts), the slot's records
// (slot-records.ts), the session's keeper (session-keeper.ts: watch, floor wait, keep-alives, fence) and registration
// (node-registration.ts). They share the session's types and ask the lifecycle for verdicts through lease-session.ts.
export { etcdAccessProblem } from './boot-checks.js';
export { startHoldFloor } from './slot-floor.js';

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

class EtcdWorkerLease implements WorkerLease {
  private client: Etcd3 | undefined;
  /** What this holder has seen of etcd's history: a revision that goes back or another cluster ID fences. */
  private readonly history = new EtcdHistory();
  /** Set when etcd stopped being trustworthy (docs/design.md §5): claims after it start above it + TTL + bound. */
  private untrustedSinceWall: number | undefined;
  /** The route of the keep-alives and `last-ms` refreshes: one member at a time, the next one on a failure. */
  private routes: EndpointRoutes | undefined;
  private state: LeaseState = 'idle';
  private message = 'not started';
  private session: Session | undefined;
  private readonly lifetime = new AbortController();
  private starting: Promise<void> | undefined;
  private releasing: Promise<void> | undefined;
  private reclaiming: Promise<void> | undefined;
  /** Cancels of ended sessions' watches, awaited (bounded) before the client closes. */
  private readonly watchCancels = new Set<Promise<unknown>>();
  private readonly listeners = new Set<(s: LeaseSnapshot) => void>();
  private readonly instruments: LeaseInstruments;
  // The collaborators, and what they ask of this lifecycle (lease-session.ts).
  private readonly host: LeaseHost;
  private readonly checks: BootChecks;
  private readonly registration: NodeRegistration;
  private readonly claimer: SlotClaimer;
  private readonly records: SlotRecords;
  private readonly keeper: SessionKeeper;

  constructor(
    private readonly cfg: LeaseConfig,
    meter: Meter,
    private readonly target: LeaseTarget,
  ) {
    this.instruments = new LeaseInstruments(meter, () => {
      const s = this.session;
      return s !== undefined && !ended(s) ? (this.cfg.clock.monoMs() - s.lastAckMono) / 1000 : undefined;
    });
    this.host = {
      cfg,
      target,
      history: this.history,
      lifetime: this.lifetime.signal,
      client: () => this.requireClient(),
      backoff: (attempt) => this.backoff(attempt),
      distrust: (why, from) => this.distrust(why, from),
      lose: (s, why) => this.lose(s, why),
      giveBack: (s, why) => this.giveBack(s, why),
    };
    this.checks = new BootChecks(cfg, this.host.client, this.history);
    this.registration = new NodeRegistration(cfg, cfg.address);
    this.claimer = new SlotClaimer(this.host, () => this.registration.address);
    this.records = new SlotRecords(this.host);
    this.keeper = new SessionKeeper(
      this.host,
      this.records,
      () => this.routes as EndpointRoutes,
      (s) => this.claimer.tendLoans(s),
      this.instruments.failures,
    );
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
    this.registration.address = address;
    const s = this.session;
    if (this.registration.wanted && s !== undefined && assigned(s)) {
      void this.registration
        .put(s)
        .catch((e: unknown) =>
          this.cfg.logger.warn({ err: errorText(e) }, 'lease: re-registering the new address failed'),
        );
    }
  }

  async register(): Promise<void> {
    if (this.releasing !== undefined)
      throw new LeaseError('released', 'this lease was released; cannot register', false);
    this.registration.wanted = true;
    const s = this.session;
    if (s !== undefined && assigned(s)) await this.registration.put(s);
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
    this.instruments.count(event);
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
      await this.retrying('layout check', () => this.checks.checkLayout());
      await this.retrying('region binding check', () => this.checks.checkBinding());
      await this.retrying('lease TTL ceiling check', () => this.checks.checkCeiling());
      // docs/design.md §7: a code this etcd lent out, or a spare it never adopted, is no home region here.
      await this.retrying('region code check', () => this.checks.checkRegionCode());
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
        // re-claim waits out any binding refusal. Another code or an unbound etcd stops a first claim (exit 2). So does
        // an etcd with no TTL ceiling, where a re-claim (its etcd restored from a backup before the pin) waits for the
        // operator's pin (docs/design.md §5, "The TTL ceiling").
        const awaitingOperator =
          isLeaseError(e) &&
          ((e.code === 'region-binding' && (reclaim || (e instanceof RegionBindingError && e.awaitsOperator))) ||
            (reclaim && e instanceof TtlCeilingError));
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

  private requireClient(): Etcd3 {
    if (this.client === undefined) throw new Error('etcd client not created');
    return this.client;
  }

  /** Grants a lease, claims a slot, writes `last-ms`, waits for the floor, assigns the target. */
  private async claimAndWait(): Promise<void> {
    const client = this.requireClient();
    const { clock, ttlSeconds, ttlMs, fenceMarginMs, requestTimeoutMs } = this.cfg;
    // Taken first: a distrust verdict from here on (the binding check included) refuses this claim.
    const epoch = this.history.epoch;
    // After a rewind, the etcd answering may be a restored one: its binding decides (another cluster ID refuses).
    if (this.untrustedSinceWall !== undefined) await this.checks.checkBinding();
    await this.checks.checkCeiling();

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
    const s = newSession(lease, leaseId, sentMono + ttlMs - fenceMarginMs, sentMono, epoch);
    this.session = s;
    this.keeper.armFence(s);

    try {
      const claimed = await this.claimer.claimFreeSlot(s);
      await this.holdAndAssign(s, claimed);
    } catch (e) {
      const wasAssigned = assigned(s);
      endSession(s, this.watchCancels);
      // A claim lost before its first mint (a restore, a cut, its floor's wait) minted nothing: its tenure, in the
      // journal and on record, is closed empty (last = first − 1), so the audit never reads a bound for a holder that
      // never minted (issue 32's simulator found that false alarm). Closed before the revoke (the record's write
      // compares the worker key's lease); the journal's close does not depend on etcd.
      void (async () => {
        if (!wasAssigned) await this.records.recordTenureEnd(s, 'fenced', -1);
        await revokeQuietly(lease, this.cfg);
      })();
      throw e;
    }
  }

  /**
   * Holds the claimed slot until its floor (last-ms and the tenure written first, keep-alives running), then assigns
   * it to the target and registers the node (docs/design.md §5).
   */
  private async holdAndAssign(s: Session, claimed: ClaimedSlot): Promise<void> {
    const { clock, requestTimeoutMs, prefix } = this.cfg;
    const { leaseId } = s;
    // The session may have ended while the claim was out (fenced at its deadline, or released): its end has
    // cancelled its watch already, so a watch made now would never be cancelled, and etcd3 would try to
    // reconnect it for ever after the client closes, keeping the process alive after release().
    checkSession(s);
    this.lifetime.signal.throwIfAborted();
    // Watched only once the slot is ours for good: a slot given back above (garbage in last-ms) is not.
    this.keeper.watchWorkerKey(s, leaseKeys.worker(prefix, claimed.region, claimed.worker), claimed.revision);
    // The binding again, read after the claim committed (docs/design.md §5, "One live cluster per code"): a retire's
    // sweep of worker keys either came after the claim (the watch above sees the key deleted and fences) or the retire
    // came before this read, which then refuses the claim before its first mint.
    await this.checks.checkBinding();

    // The records' floor, the distrust floor and the start hold, by the deployment's TTL ceiling (slot-floor.ts).
    const { floorMs, hold } = claimFloor(this.cfg, claimed.last, this.untrustedSinceWall, this.checks.holdTtlMs);
    const slot: SessionSlot = {
      region: claimed.region,
      worker: claimed.worker,
      floorMs,
      ...(claimed.spare === undefined ? {} : { spare: claimed.spare }),
    };
    s.phase = { kind: 'holding', slot };

    // last-ms and the tenure before the first mint, in one transaction: a crash from here on makes the next holder
    // wait as for an unclean end, and the audit finds the tenure that allowed the record (docs/design.md §5).
    const written = await this.records.writeFirstRecords(s, slot, claimed.last, requestTimeoutMs);
    if (written !== undefined) throw new SessionLostError(`right after the claim: ${written.why}`);
    // The tenure witnessed outside etcd before the first mint (tenure-witness.ts): a claim it cannot record is given up.
    await this.cfg.tenureWitness?.opened(this.records.witnessed(s)).catch((e: unknown) => {
      throw new SessionLostError(`right after the claim: the tenure witness could not be written: ${errorText(e)}`);
    });
    s.loop = this.keeper.keepAliveLoop(s);

    this.setState('waiting-for-floor', holdingMessage(claimed, floorMs, hold, floorMs - clock.nowMs()));
    await this.keeper.waitForFloor(s, floorMs);

    checkSession(s);
    this.lifetime.signal.throwIfAborted();
    checkTrustedSince(this.history, s, 'the slot was held for its floor');
    if (clock.monoMs() >= s.deadline) throw new SessionLostError('the fence deadline passed before the floor');
    this.target.assign({
      region: claimed.region,
      worker: claimed.worker,
      floorMs,
      deadlineMonoMs: s.deadline,
      ceilingMs: this.records.ceilingOf(s),
    });
    s.phase = { kind: 'assigned', slot };
    this.count(LeaseAttributes.acquired);
    this.setState('alive', `holding worker ${claimed.worker} of region ${claimed.region}; minting above ${floorMs}`);
    this.cfg.logger.info({ region: claimed.region, worker: claimed.worker, floorMs, leaseId }, 'lease: alive');
    if (this.registration.wanted) {
      void this.registration
        .put(s)
        .catch((e: unknown) => this.cfg.logger.warn({ err: errorText(e) }, 'lease: registering in discovery failed'));
    }
  }

  /** Lease lost or expired: fence at once, count churn, give the lease up, and claim again (docs/design.md §5). */
  private lose(s: Session, why: string): void {
    if (ended(s)) return;
    const wasAssigned = assigned(s);
    endSession(s, this.watchCancels);
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
      if (wasAssigned && this.client !== undefined) await this.records.recordTenureEnd(s, 'fenced', lastMinted);
      await revokeQuietly(s.lease, this.cfg);
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
    endSession(s, this.watchCancels);
    if (wasAssigned) this.target.unassign('lease', why);
    const slot = slotOf(s);
    this.cfg.logger.warn(
      { region: slot?.region, worker: slot?.worker, leaseId: s.leaseId, why },
      'lease: giving a borrowed slot back',
    );
    this.setState('fenced', why);
    this.reclaiming = (async () => {
      await this.records.giveBackRecords(s, () => this.count(LeaseAttributes.released));
      await revokeQuietly(s.lease, this.cfg);
      // A slot given back while claiming is handled by the claim loop; one given back while alive claims again here.
      if (wasAssigned && this.releasing === undefined && !this.lifetime.signal.aborted) await this.acquire(false, true);
    })().catch((e: unknown) => {
      if (!this.lifetime.signal.aborted) this.cfg.logger.error({ err: errorText(e) }, 'lease: re-claiming stopped');
    });
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
        endSession(s, this.watchCancels);
        if (slot !== undefined && this.client !== undefined) {
          await this.registration.deregister(this.client, s, slot.region, timeout);
          await this.records.releaseRecords(s, timeout);
          this.count(LeaseAttributes.released);
        }
        await revokeQuietly(s.lease, this.cfg);
      }
      await this.starting?.catch(() => undefined);
      await this.reclaiming;
      // Watches cancelled before the client closes (bounded: a cancel waits for etcd's answer).
      await withTimeout(Promise.all(this.watchCancels), timeout, 'cancelling the watch').catch(() => undefined);
    } finally {
      this.setState('released', 'released');
      this.state = 'released';
      this.instruments.close();
      this.routes?.close();
      this.client?.close();
      this.claimer.close();
    }
  }
}
