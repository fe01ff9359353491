import { randomInt } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, deadlineIn, errorText, outcomeUnknown, sleep, withTimeout } from './etcd-client.js';
import { keepAdoptionOnRecord } from './adoption-record.js';
import { CorruptRecordError, NoFreeWorkerError } from './errors.js';
import type { SlotHolder } from './errors.js';
import { SessionLostError, checkSession, checkTrustedSince, ended, slotOf } from './lease-session.js';
import type { ClaimedSlot, LeaseHost, Session } from './lease-session.js';
import { confirmLoan, regionEtcd } from './loan-confirmation.js';
import type { LoanVerdict } from './loan-confirmation.js';
import { describeWorkerHolder, leaseKeys, parseLastMsRecord } from './records.js';
import type { WorkerRecord } from './records.js';
import { claimSlot } from './slot-transactions.js';
import type { ClaimOutcome, SpareGuard } from './slot-transactions.js';
import { DEFAULT_LOAN_TERM_MS, loanTermOf, readRegistryNow } from './registry-identity.js';
import { lentTo, readSpareCodesLeniently } from './spare-codes.js';
import type { SpareCodeEntry } from './spare-codes.js';
import { renewLoanTerm } from './spare-registry.js';
import type { RegistryIo, SpareRegistryEntry } from './spare-registry.js';

/** A loan this node claimed under: its mirror, and its term's end as last read or renewed (wall ms; none: no term). */
interface HeldLoan {
  readonly entry: SpareCodeEntry;
  untilMs: number | undefined;
}

/**
 * Finds and claims a free slot for a session (docs/design.md §5, boot step 4): the home range first, from a random
 * worker, then (a borrower whose home range is full) the spare codes lent to its region, each loan confirmed in the
 * registry (§7). It also confirms a held borrowed slot's loan again while the slot is held.
 */
export class SlotClaimer {
  /** The spare-code registry's client, made at a borrower's first claim under a lent code (docs/design.md §7). */
  private registryClient: Etcd3 | undefined;
  /** The loans confirmed at a claim, by mirror key, each with its term's end as last read or renewed (wall ms). */
  private readonly loans = new Map<string, HeldLoan>();
  /** When the loans were last tended (monotonic ms), whether a round is out, and the deployment's term as last read. */
  private tendedMono = Number.NEGATIVE_INFINITY;
  private tending = false;
  private termMs = DEFAULT_LOAN_TERM_MS;

  constructor(
    private readonly host: LeaseHost,
    /** The node's address now, for the worker record (discovery reads it). */
    private readonly address: () => string,
  ) {}

  /**
   * Claims a slot on session `s`: one transaction per candidate, create-if-absent, reading last-ms in the same
   * transaction. The home range first; a borrower whose home range is full then tries the spare codes lent to its
   * region (docs/design.md §7). Throws {@link NoFreeWorkerError} when none is free.
   */
  async claimFreeSlot(s: Session): Promise<ClaimedSlot> {
    const { host } = this;
    const client = host.client();
    const { clock, requestTimeoutMs, prefix, nodeId } = host.cfg;
    const { lease, leaseId } = s;
    const holders: SlotHolder[] = [];
    const refused: string[] = [];
    let claimed: ClaimedSlot | undefined;
    let tried = 0;
    const tryOne = async (
      c: { region: number; worker: number },
      spare?: SpareGuard,
    ): Promise<'next' | 'claimed' | 'withdrawn'> => {
      checkSession(s);
      host.lifetime.throwIfAborted(); // released meanwhile: claim nothing more
      tried++;
      const workerKey = leaseKeys.worker(prefix, c.region, c.worker);
      const lastKey = leaseKeys.lastMs(prefix, c.region, c.worker);
      const holder: WorkerRecord = {
        nodeId,
        kind: host.cfg.kind,
        address: this.address(),
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
              host.history,
            );
          } catch (e) {
            if (!outcomeUnknown(e)) throw e;
            checkSession(s);
            host.lifetime.throwIfAborted();
            host.cfg.logger.warn(
              { key: workerKey, leaseId, asked, err: errorText(e) },
              'lease: no answer to the claim; asking again on the same lease',
            );
            await sleep(host.backoff(asked - 1), host.lifetime);
          }
        }
      };
      const outcome = await askClaim();
      const rewound = host.history.problem;
      if (rewound !== undefined) {
        host.distrust(rewound, s);
        throw new SessionLostError(`${rewound}: no claim on this history (docs/design.md §5)`);
      }
      checkTrustedSince(host.history, s, 'the claim was out');
      if (outcome.kind === 'withdrawn') {
        refused.push(`spare code ${c.region}: no longer lent (its record changed)`);
        return 'withdrawn';
      }
      if (outcome.kind === 'held') {
        holders.push({ region: c.region, worker: c.worker, holder: describeWorkerHolder(outcome.holder) });
        return 'next';
      }
      if (outcome.kind === 'adopted') {
        host.cfg.logger.warn(
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
        host.cfg.logger.error({ key: lastKey, err: why }, 'lease: refusing a slot whose last-ms is unreadable');
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
    if (claimed === undefined && host.cfg.borrowSpare) {
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
   * Tends the loans this node may borrow under (docs/design.md §7, "Registry threats" and "Loan terms"), on every
   * keep-alive tick and before its keep-alive:
   * - a held borrowed slot whose loan's term ends within a TTL is given back at once, before the keep-alive that would
   *   carry its deadline past the term: no answer from the registry keeps a slot longer than the term it last read;
   * - every half TTL while it holds one (every quarter term otherwise), each loan of its region is asked of the
   *   registry again: one the registry shows reclaimed, adopted or lent elsewhere, or whose term ended unrenewed, takes
   *   a held slot under it back; one it confirms is renewed when a quarter term has passed since its last renewal, so
   *   an idle loan stays alive while any borrower of the region runs. Runs beside the keep-alives, never delaying them.
   */
  tendLoans(s: Session): void {
    const { cfg } = this.host;
    if (cfg.registry === undefined || ended(s)) return;
    const spare = slotOf(s)?.spare;
    const held = spare === undefined ? undefined : this.loans.get(spare.key);
    const wall = cfg.clock.nowMs();
    if (held?.untilMs !== undefined && held.untilMs - wall < cfg.ttlMs) {
      this.host.giveBack(
        s,
        `spare code ${held.entry.record.code}: the loan's term ends at ${new Date(held.untilMs).toISOString()}, ` +
          'unrenewed: the borrowed slot is given back',
      );
      return;
    }
    const mono = cfg.clock.monoMs();
    const every = held === undefined ? Math.max(cfg.ttlMs / 2, this.termMs / 4) : cfg.ttlMs / 2;
    if (this.tending || mono - this.tendedMono < every) return;
    this.tendedMono = mono;
    this.tending = true;
    void this.tend(s, held)
      .catch((e: unknown) => cfg.logger.warn({ err: errorText(e) }, 'lease: could not tend the loans this time'))
      .finally(() => {
        this.tending = false;
      });
  }

  /**
   * One round of {@link tendLoans}: an adopter keeps its adoption on record (./adoption-record.ts); a borrower confirms
   * each loan, renews the confirmed, gives a held slot back on a dead one.
   */
  private async tend(s: Session, held: HeldLoan | undefined): Promise<void> {
    const { cfg } = this.host;
    const registry = this.registryIo();
    if (registry === undefined) return;
    const adoption = await keepAdoptionOnRecord(this.regionIo(), registry, cfg.region, cfg.clock.nowMs());
    if (adoption === 'rewritten')
      cfg.logger.warn(
        { code: cfg.region },
        "lease: the spare-code registry had lost this region's adoption of its code (restored?): written back",
      );
    if (adoption === 'not-adopted' && !cfg.borrowSpare) return;
    // The deployment's term sets how often an adopter or a borrower that holds no loan tends (tendLoans).
    this.termMs = loanTermOf((await readRegistryNow(registry)).record);
    if (!cfg.borrowSpare) return;
    const { loans } = await this.mirroredLoans();
    // A held loan whose mirror moved on (reclaiming) is asked about as claimed: the registry says where it went.
    if (held !== undefined && !loans.some((e) => e.key === held.entry.key)) loans.push(held.entry);
    for (const e of loans) {
      const verdict = await this.askRegistry(registry, e);
      if (verdict.kind === 'confirmed') {
        this.termMs = verdict.termMs;
        const until = await this.renew(registry, verdict.entry, verdict.termMs);
        const known = this.loans.get(e.key);
        if (known !== undefined) known.untilMs = until;
      } else if (e.key === held?.entry.key && (verdict.kind === 'dropped' || verdict.kind === 'ended') && !ended(s)) {
        this.host.giveBack(
          s,
          `spare code ${e.record.code}: the loan ${verdict.kind === 'dropped' ? 'moved on' : 'ended'} (${verdict.why}): ` +
            'the borrowed slot is given back',
        );
      }
    }
  }

  /** What the registry says now of one loan this region's etcd mirrors (./loan-confirmation.ts). */
  private askRegistry(registry: RegistryIo, e: SpareCodeEntry): Promise<LoanVerdict> {
    const { cfg } = this.host;
    return confirmLoan(
      registry,
      regionEtcd(this.host.client(), cfg.prefix, cfg.requestTimeoutMs),
      e,
      cfg.region,
      cfg.layout.maxRegion,
      { nowMs: cfg.clock.nowMs(), ttlMs: cfg.ttlMs },
    );
  }

  /** Renews a confirmed loan whose last renewal is a quarter term old; returns the term's end as now known. */
  private async renew(registry: RegistryIo, entry: SpareRegistryEntry, termMs: number): Promise<number | undefined> {
    const until = entry.record.untilMs;
    const now = this.host.cfg.clock.nowMs();
    if (until !== undefined && until - now >= termMs - termMs / 4) return until;
    try {
      return (await renewLoanTerm(registry, entry, now + termMs))?.record.untilMs ?? until;
    } catch {
      return until; // no answer: the term read stands (a renewal that committed unseen only lengthens it)
    }
  }

  /** {@link ClaimVerdict} of one loan of this region. */
  private async confirmForClaim(registry: RegistryIo, e: SpareCodeEntry): Promise<ClaimVerdict> {
    const { cfg } = this.host;
    const verdict = await this.askRegistry(registry, e);
    if (verdict.kind !== 'confirmed') return { kind: 'refused', why: verdict.why };
    const untilMs = await this.renew(registry, verdict.entry, verdict.termMs);
    const now = cfg.clock.nowMs();
    const left = untilMs === undefined ? Number.POSITIVE_INFINITY : untilMs - now;
    if (left < 2 * cfg.ttlMs)
      return { kind: 'refused', why: `its term has ${Math.round(left)} ms left, under two TTLs, and was not renewed` };
    const usableFrom = verdict.entry.record.usableFromMs;
    if (usableFrom !== undefined && now < usableFrom)
      return {
        kind: 'refused',
        why:
          `a new loan: first claims from ${new Date(usableFrom).toISOString()}, ${Math.round(usableFrom - now)} ms from ` +
          'now (a loan of the code a rewound registry forgot has ended by then)',
      };
    return { kind: 'confirmed', termMs: verdict.termMs, untilMs };
  }

  /** The loans this region's etcd mirrors as lent to it, and the spare-code records it could not read (skipped). */
  private async mirroredLoans(): Promise<{ loans: SpareCodeEntry[]; unreadable: readonly unknown[] }> {
    const { entries, unreadable } = await readSpareCodesLeniently(this.regionIo());
    return { loans: lentTo(entries, this.host.cfg.region), unreadable };
  }

  /** This region's etcd, for the spare-code reads (each request with the claim path's deadline). */
  private regionIo() {
    const { cfg } = this.host;
    return { client: this.host.client(), prefix: cfg.prefix, timeoutMs: cfg.requestTimeoutMs, layout: cfg.layout };
  }

  /** The registry's connection (made at first use), for a borrower; `undefined` without one. */
  private registryIo(): RegistryIo | undefined {
    const { cfg } = this.host;
    const registry = cfg.registry;
    if (registry === undefined) return undefined;
    this.registryClient ??= createEtcdClient(registry);
    return { client: this.registryClient, prefix: registry.prefix, timeoutMs: cfg.requestTimeoutMs };
  }

  /** Closes the registry's client, if one was made. */
  close(): void {
    this.registryClient?.close();
  }

  /** The home slots this node may claim, starting at a random one so starters spread out. */
  private candidates(): { region: number; worker: number }[] {
    const { region, workers } = this.host.cfg;
    return rotated(region, workers.first, workers.last);
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
    const { cfg } = this.host;
    const { loans, unreadable } = await this.mirroredLoans();
    for (const u of unreadable) cfg.logger.error({ err: u }, 'lease: ignoring an unreadable spare-code record');
    const confirmed: { guard: SpareGuard; slots: { region: number; worker: number }[] }[] = [];
    for (const e of loans) {
      const registry = this.registryIo();
      if (registry === undefined) break; // borrowSpare requires it (config.ts); no registry, no loan
      const verdict = await this.confirmForClaim(registry, e);
      if (verdict.kind !== 'confirmed') {
        refused.push(`spare code ${e.record.code}: loan not confirmed by the registry (${verdict.why})`);
        cfg.logger.warn(
          { code: e.record.code, verdict: verdict.kind, why: verdict.why },
          'lease: no claim under a loan the registry does not confirm',
        );
        continue;
      }
      this.termMs = verdict.termMs;
      this.loans.set(e.key, { entry: e, untilMs: verdict.untilMs });
      confirmed.push({
        guard: { key: e.key, modRevision: e.modRevision },
        slots: rotated(e.record.code, 0, cfg.layout.maxWorker),
      });
    }
    return confirmed;
  }
}

/**
 * A loan confirmed for a claim: the registry confirms it with a TTL of its term left, a renewal (when a quarter term
 * has passed since the last) carries it on, and then two TTLs of it must remain: one for the claim's first keep-alive
 * tick, which gives the slot back a TTL before the term ends (docs/design.md §7, "Loan terms").
 */
type ClaimVerdict =
  | { readonly kind: 'confirmed'; readonly termMs: number; readonly untilMs: number | undefined }
  | { readonly kind: 'refused'; readonly why: string };

/** The workers first … last of `region`, starting at a random one so starters spread out. */
function rotated(region: number, first: number, last: number): { region: number; worker: number }[] {
  const all: { region: number; worker: number }[] = [];
  for (let w = first; w <= last; w++) all.push({ region, worker: w });
  const start = randomInt(all.length);
  return [...all.slice(start), ...all.slice(0, start)];
}
