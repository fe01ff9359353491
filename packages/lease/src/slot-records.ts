import type { Etcd3 } from 'etcd3';
import { errorText } from './etcd-client.js';
import { lost, slotOf } from './lease-session.js';
import type { LeaseHost, Session, SessionSlot, SlotLoss } from './lease-session.js';
import { leaseKeys } from './records.js';
import type { LastMsRecord } from './records.js';
import { isOwnLateWrite, writeLastMsRecord } from './slot-transactions.js';
import { closeTenure, openTenure, tenureKey, updateTenureRecord } from './tenure-ledger.js';
import type { JoinedWrite, Tenure, TenureEnd } from './tenure-ledger.js';
import type { TenureWitnessRecord } from './tenure-witness.js';

/**
 * The records a session writes on its slot (docs/design.md §5): the first `last-ms` and the tenure before the first
 * mint, every `last-ms` refresh (ordered by its mod revision, never below what was acknowledged: the wall ceiling is
 * the last acknowledged value + TTL − margin), the final released `last-ms` and the tenure's end, and the tenure's
 * witness outside etcd. A write whose answer shows etcd's history going back makes the host distrust etcd.
 */
export class SlotRecords {
  constructor(private readonly host: LeaseHost) {}

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
  async writeFirstRecords(
    s: Session,
    slot: SessionSlot,
    last: LastMsRecord | undefined,
    timeoutMs: number,
  ): Promise<SlotLoss | undefined> {
    const { clock, prefix } = this.host.cfg;
    const startMono = clock.monoMs();
    const now = clock.nowMs();
    const iso = new Date(now).toISOString();
    const mine: Tenure = {
      code: slot.region,
      worker: slot.worker,
      kind: this.host.cfg.kind,
      nodeId: this.host.cfg.nodeId,
      leaseId: s.leaseId,
      firstMs: slot.floorMs + 1,
      lastMs: null,
      end: 'open',
      startedAt: iso,
    };
    s.tenure = mine;
    const record = this.nextLastMs(s, slot, false);
    const lastKey = leaseKeys.lastMs(prefix, slot.region, slot.worker);
    const outcome = await this.updateTenure(s, (r) => openTenure(r, mine, last, this.host.cfg.ttlMs, iso), {
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
  witnessed(s: Session, tenure: Tenure | undefined = s.tenure): TenureWitnessRecord {
    if (tenure === undefined) throw new Error('no tenure to witness');
    return {
      tenure,
      ttlMs: this.host.cfg.ttlMs,
      lastMs: s.ackedLastMs,
      etcd: this.host.cfg.endpoints.join(','),
      updatedAt: new Date(this.host.cfg.clock.nowMs()).toISOString(),
    };
  }

  /**
   * Closes this session's tenure as `end` with `lastMs` (tenure-ledger.ts); best effort, never thrown: a tenure left
   * open is closed by the next holder as `expired`, with the bound of what it may have minted.
   */
  async recordTenureEnd(s: Session, end: Exclude<TenureEnd, 'open'>, lastMs: number): Promise<void> {
    const mine = s.tenure;
    if (mine === undefined) return;
    const iso = new Date(this.host.cfg.clock.nowMs()).toISOString();
    try {
      const closed: Tenure = { ...mine, lastMs: Math.max(lastMs, mine.firstMs - 1), end, endedAt: iso };
      await this.host.cfg.tenureWitness?.closed(this.witnessed(s, closed));
      const outcome = await this.updateTenure(s, (r) => closeTenure(r, mine, end, lastMs, iso));
      if (outcome === 'not-held')
        this.host.cfg.logger.warn(
          { end },
          'lease: tenure not closed: the worker key is gone (the next holder closes it)',
        );
    } catch (e) {
      this.host.cfg.logger.warn(
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
    const { prefix, requestTimeoutMs, logger } = this.host.cfg;
    const slot = slotOf(s);
    if (slot === undefined) return 'not-held';
    const { region, worker } = slot;
    const keys = { worker: leaseKeys.worker(prefix, region, worker), tenures: tenureKey(prefix, region, worker) };
    const outcome = await updateTenureRecord(this.host.client(), s.leaseId, keys, update, requestTimeoutMs, {
      ...(s.tenureRevision === undefined ? {} : { lastWritten: s.tenureRevision }),
      ...(joined === undefined ? {} : { joined, history: this.host.history }),
      onForeign: (found) =>
        logger.error(
          { key: keys.tenures, found: found?.value.slice(0, 200) ?? 'deleted' },
          'lease: the tenure record changed under a key this holder holds, not by a write of its own (not fenced: it is an audit record; idgen audit reports it)',
        ),
    });
    if (outcome.kind === 'not-held' || outcome.kind === 'joined-moved' || outcome.kind === 'joined-withdrawn')
      return outcome.kind;
    if (outcome.kind === 'unchanged' && joined !== undefined) return 'left';
    if (outcome.kind === 'unreadable') {
      logger.error(
        { key: keys.tenures, err: outcome.problem },
        'lease: the tenure record is unreadable; left as it is',
      );
      return 'left';
    }
    if (outcome.kind === 'contended') {
      logger.error(
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

  /** The wall ceiling of a session (docs/design.md §5): its last acknowledged `last-ms` + TTL − margin. */
  ceilingOf(s: Session): number {
    const { ttlMs, fenceMarginMs } = this.host.cfg;
    return s.ackedLastMs < 0 ? Number.NEGATIVE_INFINITY : s.ackedLastMs + ttlMs - fenceMarginMs;
  }

  /**
   * The `last-ms` record to send now: at least the clock, the floor, the last minted millisecond and every value
   * acknowledged before (counted as sent).
   */
  private nextLastMs(s: Session, slot: SessionSlot, released: boolean): LastMsRecord {
    const now = this.host.cfg.clock.nowMs();
    const ms = Math.max(now, slot.floorMs, this.host.target.lastMintedMs(), s.ackedLastMs);
    s.sentLastMs = Math.max(s.sentLastMs, ms);
    return {
      ms,
      released,
      nodeId: this.host.cfg.nodeId,
      leaseId: s.leaseId,
      at: new Date(now).toISOString(),
      ttlMs: this.host.cfg.ttlMs,
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
  async writeLastMs(
    s: Session,
    released: boolean,
    timeoutMs: number,
    client: Etcd3 = this.host.client(),
  ): Promise<SlotLoss | undefined> {
    const slot = slotOf(s);
    if (slot === undefined) return lost('no slot claimed');
    const { cfg } = this.host;
    const workerKey = leaseKeys.worker(cfg.prefix, slot.region, slot.worker);
    const lastKey = leaseKeys.lastMs(cfg.prefix, slot.region, slot.worker);
    const { clock } = cfg;
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
        this.host.history,
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
        if (s.tenure?.end === 'open') cfg.tenureWitness?.refreshed(this.witnessed(s));
        return undefined;
      }
      if (outcome.kind === 'not-held') return lost('the worker key is no longer held by this lease');
      const own = isOwnLateWrite(lastKey, outcome.found, {
        nodeId: cfg.nodeId,
        leaseId: s.leaseId,
        highestSentMs: s.sentLastMs,
      });
      if (own === undefined || outcome.found === undefined) {
        const what = outcome.found === undefined ? 'deleted' : JSON.stringify(outcome.found.value.slice(0, 120));
        return lost(
          `${lastKey} was changed under this holder (${what}), not by a write of its own: fenced (docs/design.md §5, root of trust)`,
        );
      }
      cfg.logger.warn(
        { key: lastKey, ms: own.ms },
        'lease: a last-ms write given up on had landed; adopting it and writing again',
      );
      s.lastMsRevision = outcome.found.modRevision;
      s.ackedLastMs = Math.max(s.ackedLastMs, own.ms);
    }
    return lost(`${lastKey} kept changing under this holder`);
  }

  /**
   * The final records of a borrowed slot given back (docs/design.md §7): `last-ms` marked released (the handover may
   * start right above it) and the tenure closed `reclaimed`; best effort, never thrown. `onReleased` runs once
   * `last-ms` is written, before the tenure closes.
   */
  async giveBackRecords(s: Session, onReleased: () => void): Promise<void> {
    const { logger, requestTimeoutMs } = this.host.cfg;
    try {
      const loss = await this.writeLastMs(s, true, requestTimeoutMs);
      if (loss === undefined) {
        onReleased();
        await this.recordTenureEnd(s, 'reclaimed', s.ackedLastMs);
        return;
      }
      logger.warn(
        { why: loss.why },
        'lease: final last-ms of the borrowed slot not written (the handover waits as after a crash)',
      );
    } catch (e) {
      logger.warn(
        { err: errorText(e) },
        'lease: final last-ms of the borrowed slot failed (the handover waits as after a crash)',
      );
    }
  }

  /**
   * The final records of a release (docs/design.md §5, shutdown): once the keep-alive loop is done, `last-ms` marked
   * released at the last minted millisecond (minting stopped before) and the tenure closed `released`; best effort.
   */
  async releaseRecords(s: Session, timeoutMs: number): Promise<void> {
    const { logger } = this.host.cfg;
    try {
      // A refresh the keep-alive loop had in flight (released: false) must not land after the final record:
      // wait for the loop (ended above, its requests bounded by their timeouts) before writing it.
      await s.loop?.catch(() => undefined);
      // Minting stopped above, so lastMintedMs() is final: the next holder may start right above it.
      const loss = await this.writeLastMs(s, true, timeoutMs);
      if (loss !== undefined) logger.warn({ why: loss.why }, 'lease: final last-ms not written; left as it was');
      // The tenure closes at the final released millisecond (the next holder may start right above it).
      else await this.recordTenureEnd(s, 'released', s.ackedLastMs);
    } catch (e) {
      logger.warn({ err: errorText(e) }, 'lease: final last-ms write failed (the next holder waits as after a crash)');
    }
  }

  /**
   * After a `last-ms` write of session `s`: when its answer (or an earlier one) showed etcd's history going back, the
   * verdict (the host's distrust) and the slot's loss; else undefined.
   */
  private rewoundLoss(s: Session): SlotLoss | undefined {
    const rewound = this.host.history.problem;
    if (rewound === undefined) return undefined;
    this.host.distrust(rewound, s);
    return lost(`${rewound}: fenced, every slot unclean as of now (docs/design.md §5)`);
  }
}
