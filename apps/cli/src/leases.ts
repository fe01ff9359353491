import { EXIT_OK, EXIT_PROBLEM, type ExitCode } from './exit-codes.js';
import type { VerbContext } from './context.js';
import { judgeLastMs, type LastMsVerdict } from '@idgen/lease/records';
import { openEtcdReader, refuseOtherRegion } from './etcd-state.js';
import { deadlines, etcdConnection, integerOption, type EtcdFlags } from './options.js';
import { spareNote } from './spare.js';
import { isoTime, renderTable, seconds } from './table.js';

/** Flags of `idgen leases`. */
export interface LeasesFlags extends EtcdFlags {
  region?: string;
  timeoutMs: string;
  json: boolean;
}

/** One slot as `idgen leases --json` prints it. */
export interface SlotReport {
  readonly region: number;
  readonly worker: number;
  /** `null`: nobody holds the slot. */
  readonly holder: {
    readonly nodeId: string;
    readonly kind: string;
    readonly address: string;
    readonly startedAt: string;
    readonly leaseId: string;
    /** Seconds etcd gives the lease; −1 once it has expired. */
    readonly ttlSeconds: number | undefined;
    /** In discovery: callers are sent to it. */
    readonly registered: boolean;
  } | null;
  /** `null`: no `last-ms` record (the slot was never minted in). */
  readonly lastMs: {
    readonly ms: number;
    readonly time: string;
    /** Now minus `ms`: negative when the record is ahead of this machine's clock. */
    readonly ageMs: number;
    readonly released: boolean;
    readonly nodeId: string;
    readonly ttlMs?: number;
    readonly verdict: LastMsVerdict;
  } | null;
  /**
   * `poisoned` (last-ms far ahead of now), `ahead` (up to one TTL ahead), `corrupt: …`; `borrowed: code 5, lent to
   * region 2` (a slot under a spare code this etcd lent, docs/design.md §7: not a problem); empty when fine.
   */
  readonly flags: readonly string[];
}

/** Flags that say something without being a problem (exit 0). */
const informational = (f: string): boolean => f === 'ahead' || f.startsWith('borrowed: ');

/**
 * `idgen leases`: every worker slot with a holder or a `last-ms` record, read at one etcd revision.
 * Exit 1 if a record is poisoned or corrupt, or there is no layout record.
 */
export async function runLeases(flags: LeasesFlags, ctx: VerbContext): Promise<ExitCode> {
  const d = deadlines(flags);
  const region = flags.region === undefined ? undefined : integerOption('--region', flags.region, 0, 1023);
  const connection = etcdConnection(flags);
  if (region !== undefined) await refuseOtherRegion(connection, d, region);
  const reader = await openEtcdReader(connection, d);
  let report: {
    revision: string;
    nowMs: number;
    layoutProblem: string | undefined;
    slots: SlotReport[];
    spareProblems: readonly string[];
  };
  try {
    const snapshot = await reader.snapshot(region === undefined ? undefined : [region]);
    const ttls = await reader.leaseTtls(
      snapshot.slots.flatMap((s) => (s.holder === undefined ? [] : [s.holder.leaseId])),
    );
    const nowMs = ctx.nowMs();
    const registered = new Set(snapshot.nodes.map((n) => `${n.region}/${n.nodeId}`));
    const slots = snapshot.slots.map((s): SlotReport => {
      const loan = snapshot.spareCodes.get(s.region);
      const verdict = s.lastMs === undefined ? 'ok' : judgeLastMs(s.lastMs, nowMs);
      return {
        region: s.region,
        worker: s.worker,
        holder:
          s.holder === undefined
            ? null
            : {
                nodeId: s.holder.nodeId,
                kind: s.holder.kind,
                address: s.holder.address,
                startedAt: s.holder.startedAt,
                leaseId: s.holder.leaseId,
                ttlSeconds: ttls.get(s.holder.leaseId),
                registered: registered.has(`${s.region}/${s.holder.nodeId}`),
              },
        lastMs:
          s.lastMs === undefined
            ? null
            : {
                ms: s.lastMs.ms,
                time: isoTime(s.lastMs.ms),
                ageMs: nowMs - s.lastMs.ms,
                released: s.lastMs.released,
                nodeId: s.lastMs.nodeId,
                ...(s.lastMs.ttlMs === undefined ? {} : { ttlMs: s.lastMs.ttlMs }),
                verdict,
              },
        flags: [
          ...(verdict === 'ok' ? [] : [verdict]),
          ...s.corrupt.map((c) => `corrupt: ${c}`),
          ...(loan === undefined || loan.state === 'adopted' ? [] : [`borrowed: ${spareNote(loan)}`]),
        ],
      };
    });
    report = {
      revision: snapshot.revision,
      nowMs,
      layoutProblem: snapshot.layoutProblem,
      slots,
      spareProblems: snapshot.spareProblems,
    };
  } finally {
    reader.close();
  }

  if (flags.json) ctx.io.out(JSON.stringify(report));
  else {
    const rows = report.slots.map((s) => [
      String(s.region),
      String(s.worker),
      s.holder?.nodeId ?? '',
      s.holder?.kind ?? '',
      s.holder?.address ?? '',
      s.holder === null
        ? ''
        : s.holder.ttlSeconds === undefined || s.holder.ttlSeconds < 0
          ? 'expired'
          : `${s.holder.ttlSeconds}s`,
      s.holder === null ? '' : s.holder.registered ? 'yes' : 'no',
      s.lastMs === null ? '' : isoTime(s.lastMs.ms),
      s.lastMs === null
        ? ''
        : s.lastMs.ageMs >= 0
          ? `${seconds(s.lastMs.ageMs)} ago`
          : `${seconds(-s.lastMs.ageMs)} AHEAD`,
      s.lastMs === null ? '' : s.lastMs.released ? 'yes' : 'no',
      s.flags.map((f) => (f === 'poisoned' ? 'POISONED' : f)).join('; '),
    ]);
    const headers = [
      'REGION',
      'WORKER',
      'HOLDER',
      'KIND',
      'ADDRESS',
      'TTL',
      'DISCOVERY',
      'LAST-MS',
      'AGE',
      'RELEASED',
      'FLAGS',
    ];
    for (const line of renderTable(headers, rows)) ctx.io.out(line);
    if (report.slots.length === 0)
      ctx.io.out(`(no slot has a holder or a last-ms record${region === undefined ? '' : ` in region ${region}`})`);
  }
  if (report.layoutProblem !== undefined) ctx.io.err(`idgen leases: ${report.layoutProblem}`);
  const poisoned = report.slots.filter((s) => s.flags.some((f) => !informational(f)));
  for (const s of poisoned)
    ctx.io.err(
      `idgen leases: region ${s.region} worker ${s.worker}: ${s.flags.filter((f) => !informational(f)).join('; ')}`,
    );
  for (const p of report.spareProblems) ctx.io.err(`idgen leases: ${p}`);
  return poisoned.length > 0 || report.layoutProblem !== undefined || report.spareProblems.length > 0
    ? EXIT_PROBLEM
    : EXIT_OK;
}
