import { randomInt } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient, deadlineIn, errorText, outcomeUnknown, sleep, withTimeout } from './etcd-client.js';
import { CorruptRecordError, NoFreeWorkerError } from './errors.js';
import type { SlotHolder } from './errors.js';
import { SessionLostError, checkSession, checkTrustedSince, ended, slotOf } from './lease-session.js';
import type { ClaimedSlot, LeaseHost, Session } from './lease-session.js';
import { confirmLoan, regionEtcd } from './loan-confirmation.js';
import { describeWorkerHolder, leaseKeys, parseLastMsRecord } from './records.js';
import type { WorkerRecord } from './records.js';
import { claimSlot } from './slot-transactions.js';
import type { ClaimOutcome, SpareGuard } from './slot-transactions.js';
import { lentTo, readSpareCodesLeniently } from './spare-codes.js';
import type { SpareCodeEntry } from './spare-codes.js';

/**
 * Finds and claims a free slot for a session (docs/design.md §5, boot step 4): the home range first, from a random
 * worker, then (a borrower whose home range is full) the spare codes lent to its region, each loan confirmed in the
 * registry (§7). It also confirms a held borrowed slot's loan again while the slot is held.
 */
export class SlotClaimer {
  /** The spare-code registry's client, made at a borrower's first claim under a lent code (docs/design.md §7). */
  private registryClient: Etcd3 | undefined;
  /** The loans confirmed at a claim, by mirror key: what a holder of a borrowed slot confirms again while it holds. */
  private readonly loans = new Map<string, SpareCodeEntry>();
  /** When the held borrowed slot's loan was last confirmed (monotonic ms). */
  private loanCheckedMono = 0;

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
   * A holder of a borrowed slot asks the registry again, every half TTL, whether its loan still stands
   * (docs/design.md §7, "Registry threats"): a registry that shows the code reclaimed, adopted or lent elsewhere (the
   * loan moved on without this etcd's mirror: a registry restored and a second lend) takes the slot back at once. No
   * answer keeps the slot: the registry refuses a second lend of a code it records lent, and a restored registry is
   * refused for lend until it is reconciled (./registry-guard.ts). Runs beside the keep-alives, never delaying them.
   */
  confirmHeldLoan(s: Session): void {
    const { cfg } = this.host;
    const registry = cfg.registry;
    const spare = slotOf(s)?.spare;
    if (registry === undefined || spare === undefined || this.registryClient === undefined || ended(s)) return;
    const now = cfg.clock.monoMs();
    if (now - this.loanCheckedMono < cfg.ttlMs / 2) return;
    this.loanCheckedMono = now;
    const entry = this.loans.get(spare.key);
    if (entry === undefined) return;
    void confirmLoan(
      { client: this.registryClient, prefix: registry.prefix, timeoutMs: cfg.requestTimeoutMs },
      regionEtcd(this.host.client(), cfg.prefix, cfg.requestTimeoutMs),
      entry,
      cfg.region,
      cfg.layout.maxRegion,
    ).then((verdict) => {
      if (verdict.kind === 'dropped' && !ended(s))
        this.host.giveBack(
          s,
          `spare code ${entry.record.code}: the loan moved on (${verdict.why}): the borrowed slot is given back`,
        );
    });
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
    const { entries, unreadable } = await readSpareCodesLeniently({
      client: this.host.client(),
      prefix: cfg.prefix,
      timeoutMs: cfg.requestTimeoutMs,
      layout: cfg.layout,
    });
    for (const u of unreadable) cfg.logger.error({ err: u }, 'lease: ignoring an unreadable spare-code record');
    const confirmed: { guard: SpareGuard; slots: { region: number; worker: number }[] }[] = [];
    const registry = cfg.registry;
    for (const e of lentTo(entries, cfg.region)) {
      if (registry === undefined) break; // borrowSpare requires it (config.ts); no registry, no loan
      this.registryClient ??= createEtcdClient(registry);
      const verdict = await confirmLoan(
        { client: this.registryClient, prefix: registry.prefix, timeoutMs: cfg.requestTimeoutMs },
        regionEtcd(this.host.client(), cfg.prefix, cfg.requestTimeoutMs),
        e,
        cfg.region,
        cfg.layout.maxRegion,
      );
      if (verdict.kind !== 'confirmed') {
        refused.push(`spare code ${e.record.code}: loan not confirmed by the registry (${verdict.why})`);
        cfg.logger.warn(
          { code: e.record.code, verdict: verdict.kind, why: verdict.why },
          'lease: no claim under a loan the registry does not confirm',
        );
        continue;
      }
      this.loans.set(e.key, e);
      confirmed.push({
        guard: { key: e.key, modRevision: e.modRevision },
        slots: rotated(e.record.code, 0, cfg.layout.maxWorker),
      });
    }
    return confirmed;
  }
}

/** The workers first … last of `region`, starting at a random one so starters spread out. */
function rotated(region: number, first: number, last: number): { region: number; worker: number }[] {
  const all: { region: number; worker: number }[] = [];
  for (let w = first; w <= last; w++) all.push({ region, worker: w });
  const start = randomInt(all.length);
  return [...all.slice(start), ...all.slice(0, start)];
}
