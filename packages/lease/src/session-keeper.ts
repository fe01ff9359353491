import type { Counter } from '@opentelemetry/api';
import { EtcdLeaseInvalidError } from 'etcd3';
import type { Etcd3 } from 'etcd3';
import { errorText, sleep, withTimeout } from './etcd-client.js';
import { keepAliveOnce } from './endpoint-routes.js';
import type { EndpointRoutes } from './endpoint-routes.js';
import { assigned, checkSession, ended } from './lease-session.js';
import type { LeaseHost, Session } from './lease-session.js';
import type { SlotRecords } from './slot-records.js';

/**
 * Keeps a session's slot (docs/design.md §5): the watch on its worker key, the wait for its floor, the keep-alive loop
 * with its `last-ms` refreshes, and the fence at the deadline. Every loss it finds goes to the host, which fences.
 */
export class SessionKeeper {
  constructor(
    private readonly host: LeaseHost,
    private readonly records: SlotRecords,
    /** The route of the keep-alives and `last-ms` refreshes: one member at a time, the next one on a failure. */
    private readonly routes: () => EndpointRoutes,
    /** Asked after every round of keep-alives: a borrowed slot's loan confirmed again (slot-claimer.ts). */
    private readonly tendLoans: (s: Session) => void,
    /** Keep-alives (or their `last-ms` refresh) that failed or timed out. */
    private readonly failures: Counter,
  ) {}

  /**
   * Watches this session's own worker key from just after the claim: deleted or overwritten by anyone (an
   * operator's etcdctl, a forged release), the holder fences at once instead of at its next refresh (docs/design.md §5,
   * root of trust). The lease's own end (expiry, revoke) deletes it too; by then the session has ended.
   */
  watchWorkerKey(s: Session, key: string, claimRevision: string): void {
    const from = (BigInt(claimRevision) + 1n).toString();
    // watcher(), not create(): the Watcher exists at once, so the session's end can always cancel it, even while
    // it is still connecting. One never cancelled keeps etcd3's watch manager reconnecting on timers for ever,
    // and the process alive after the client is closed.
    const w = this.host.client().watch().key(key).startRevision(from).watcher();
    s.watcher = w;
    const changed = (what: string) => (): void => {
      if (ended(s)) return;
      this.host.distrust(`the worker key ${key} was ${what} under this holder`, s);
      this.host.lose(
        s,
        `the worker key ${key} was ${what} under this holder: fenced at once (docs/design.md §5, root of trust)`,
      );
    };
    w.on('delete', changed('deleted'));
    w.on('put', changed('overwritten'));
    w.on('error', (e) =>
      this.host.cfg.logger.warn({ err: errorText(e), key }, 'lease: the watch on the worker key failed; it reconnects'),
    );
  }

  /** Waits until the wall clock passes `floorMs` (docs/design.md §5: never mint at or below it). */
  async waitForFloor(s: Session, floorMs: number): Promise<void> {
    for (;;) {
      checkSession(s);
      const now = this.host.cfg.clock.nowMs();
      if (now > floorMs) return;
      try {
        await sleep(Math.min(floorMs - now + 1, 1000), s.abort.signal);
      } catch {
        checkSession(s);
      }
    }
  }

  /**
   * Keep-alive on our own loop (not the client's: its `lost` event can come a whole TTL after etcd expired the
   * lease, docs/toolchain.md). Each keep-alive's send time is taken before sending; after the ack and the `last-ms`
   * refresh, the deadline moves to send time + TTL − margin (docs/design.md §5). Failures are counted and retried; the
   * deadline alone decides when minting stops.
   */
  async keepAliveLoop(s: Session): Promise<void> {
    const { keepAliveIntervalMs } = this.host.cfg;
    const routes = this.routes();
    while (!ended(s)) {
      try {
        await sleep(keepAliveIntervalMs, s.abort.signal);
      } catch {
        return;
      }
      // Before the keep-alive: a borrowed slot whose loan's term is ending is given back here (docs/design.md §7).
      this.tendLoans(s);
      // One member down, paused or slow costs no fence (docs/design.md §5): a refresh that failed on one endpoint is
      // asked again at once of the next, each endpoint once, before the loop goes back to its interval.
      for (let tried = 0; tried < routes.size && !ended(s); tried++) {
        const outcome = await this.refreshOnce(s, routes.current());
        if (outcome !== 'failed') break;
      }
    }
  }

  /**
   * One keep-alive and `last-ms` refresh through `client`: `done` (acknowledged, the deadline moved), `ended` (the
   * session ended, lost or released), or `failed` (this member did not answer in time: the route moves on).
   */
  private async refreshOnce(s: Session, client: Etcd3): Promise<'done' | 'ended' | 'failed'> {
    const { host } = this;
    const { keepAliveTimeoutMs, ttlMs, fenceMarginMs, clock } = host.cfg;
    const routes = this.routes();
    const sentMono = clock.monoMs();
    const left = (): number => keepAliveTimeoutMs - (clock.monoMs() - sentMono);
    try {
      const header = await withTimeout(
        keepAliveOnce(client, s.leaseId, keepAliveTimeoutMs),
        keepAliveTimeoutMs,
        'keep-alive',
      );
      const rewound = host.history.observe(header);
      if (rewound !== undefined) {
        host.distrust(rewound, s);
        host.lose(s, `${rewound}: fenced, every slot unclean as of now (docs/design.md §5)`);
        return 'ended';
      }
    } catch (e) {
      if (ended(s)) return 'ended';
      if (e instanceof EtcdLeaseInvalidError) {
        // Gone without a release: a lease etcd expired, or one a restored etcd never had.
        host.distrust(`etcd says lease ${s.leaseId} is gone`, s);
        host.lose(s, `etcd says lease ${s.leaseId} has expired`);
        return 'ended';
      }
      routes.failed(client);
      this.keepAliveFailed(s, e);
      return 'failed';
    }
    if (ended(s)) return 'ended'; // released (or lost) while the keep-alive was out: no refresh after the final record
    try {
      if (left() <= 0) throw new Error('no time left for the last-ms refresh');
      const loss = await this.records.writeLastMs(s, false, left(), client);
      if (loss !== undefined) {
        if (loss.kind === 'withdrawn') host.giveBack(s, loss.why);
        else host.lose(s, loss.why);
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
    const inMs = Math.round(s.deadline - this.host.cfg.clock.monoMs());
    this.host.cfg.logger.warn(
      { err: errorText(e), deadlineInMs: inMs, leaseId: s.leaseId },
      'lease: keep-alive failed',
    );
  }

  /** Both limits move after an acknowledged keep-alive and `last-ms` refresh: the deadline and the wall ceiling. */
  private extend(s: Session, deadline: number): void {
    if (deadline > s.deadline) s.deadline = deadline;
    if (assigned(s)) this.host.target.extend({ deadlineMonoMs: s.deadline, ceilingMs: this.records.ceilingOf(s) });
    this.armFence(s);
  }

  /** Schedules the fence at the deadline (the guard also refuses past it on its own). */
  armFence(s: Session): void {
    clearTimeout(s.fenceTimer);
    if (ended(s)) return;
    const { clock, ttlMs, fenceMarginMs } = this.host.cfg;
    const delay = s.deadline - clock.monoMs();
    s.fenceTimer = setTimeout(
      () => {
        if (ended(s)) return;
        if (clock.monoMs() >= s.deadline) {
          this.host.lose(
            s,
            `no keep-alive acknowledged in time: fenced at the deadline (TTL ${ttlMs} ms − margin ${fenceMarginMs} ms), before etcd could expire the lease`,
          );
        } else {
          this.armFence(s);
        }
      },
      Math.max(0, delay),
    );
  }
}
