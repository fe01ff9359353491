/**
 * The verdict of a chaos run, once everything has stopped: every ID every caller, the probe and the embedded
 * callers received, checked against the rules (duplicates, invented IDs, holders, the clock bound), the outages per
 * fault window, and each fault's fence expectation (issue 7). {@link judgeRun} turns it all into the
 * {@link ChaosResult} the report prints.
 */
import { callerCost, outsideSpans, type CallerCostReport } from './caller-cost.js';
import type { AuditOutcome } from './faults/audit.js';
import { judgeMemberDown } from './faults/etcd-member-down.js';
import type { MemberDown } from './fault-context.js';
import type { EmbeddedFleet } from './embedded-fleet.js';
import type { FenceEvent, NodeFleet } from './node-fleet.js';
import { sumNodeMetrics } from './node-metrics.js';
import { failoverReport, regionViolations, type RegionOutage, type RegionPart, type RegionsReport } from './regions.js';
import { probeBlocksFile, readBlocksFile, readCallerRecords, type CallerRecords } from './records.js';
import type { ChaosOptions, ChaosResult, FaultRecord } from './run.js';
import type { Fault, FaultKind, Schedule } from './schedule.js';
import {
  checkClockBound,
  checkHandedOut,
  checkHolders,
  duplicatesPerWindow,
  expandBlocks,
  findDuplicates,
  outageWindows,
  type ClockAllowance,
  type DuplicateReport,
  type HandedOutReport,
  type OutageReport,
  type ReceivedBlock,
  type Window,
} from './verify.js';

/** The clock bound chrony keeps (docs/design.md §3: clocks within 10 ms). */
export const CLOCK_BOUND_MS = 10;

/** What a caller process printed when it stopped (`caller stopped`), when it did. */
export type CallerSummary = { index: number; calls: number; ids: number; failed: number } | undefined;

/** What the run hands to {@link judgeRun}. */
export interface RunOutcome {
  readonly schedule: Schedule;
  readonly loadStart: number;
  readonly loadMs: number;
  readonly dir: string;
  readonly records: FaultRecord[];
  readonly skipped: Fault[];
  readonly fleet: NodeFleet;
  readonly embedded: EmbeddedFleet | undefined;
  readonly callerSummaries: readonly CallerSummary[];
  readonly clockAllowances: readonly ClockAllowance[];
  readonly memberDowns: ReadonlyMap<FaultRecord, MemberDown>;
  readonly audit: AuditOutcome;
  /** The further regions of a run over regions (empty otherwise), their outages, and each caller's home region. */
  readonly regions: readonly RegionPart[];
  readonly regionOutages: ReadonlyMap<FaultRecord, RegionOutage>;
  readonly callerHomes: readonly number[];
}

/** Rule 1 over every ID a node handed to any caller, and over every ID the clients handed out. */
function checkRuleOne(
  all: readonly CallerRecords[],
  receivedIds: BigUint64Array,
): { duplicates: DuplicateReport; handedOutDuplicates: DuplicateReport; handedOut: HandedOutReport } {
  const duplicates = findDuplicates(receivedIds); // sorts receivedIds
  let handedTotal = 0;
  for (const c of all) handedTotal += c.handedOut.length;
  const handedAll = new BigUint64Array(handedTotal);
  let at = 0;
  let invented = 0;
  let inventedChecked = 0;
  const inventedExamples: bigint[] = [];
  for (const c of all) {
    handedAll.set(c.handedOut, at);
    at += c.handedOut.length;
    const h = checkHandedOut(c.handedOut, c.blocks);
    invented += h.invented;
    inventedChecked += h.checked;
    inventedExamples.push(...h.examples);
  }
  const handedOutDuplicates = findDuplicates(handedAll);
  const handedOut: HandedOutReport = { checked: inventedChecked, invented, examples: inventedExamples.slice(0, 20) };
  return { duplicates, handedOutDuplicates, handedOut };
}

/** Windows from when each fault really began (a late start moves its window) to the next one; ms from the load start. */
function faultWindows(ran: readonly FaultRecord[], loadMs: number): Window[] {
  const windows: Window[] = [{ label: 'warm-up (no fault)', startMs: 0, endMs: ran[0]?.startedMs ?? loadMs }];
  ran.forEach((r, i) => {
    const end = ran[i + 1]?.startedMs ?? loadMs;
    windows.push({
      label: `#${r.fault.index} ${r.fault.kind}`,
      startMs: r.startedMs,
      endMs: Math.max(end, r.startedMs + 1),
    });
  });
  return windows;
}

/** Counts the guard's fences between `lo` and `hi` (wall ms), of one reason and one node when given. */
type FencesIn = (lo: number, hi: number, reason?: string, name?: string) => number;

/** One fault's window, for its fence expectation. */
interface FenceWindow {
  readonly r: FaultRecord;
  /** Wall ms the fault began, its effect ended, and the next fault began (or the load ended). */
  readonly from: number;
  readonly to: number;
  readonly nextStart: number;
  readonly inWindow: FencesIn;
  readonly outages: readonly OutageReport[];
  readonly memberDowns: ReadonlyMap<FaultRecord, MemberDown>;
}

/** The fence expectation of the kinds that have one: sets `expectationMissed` when it does not hold. */
const FENCE_EXPECTATIONS: Partial<Record<FaultKind, (w: FenceWindow) => void>> = {
  'etcd-slow-short': ({ r, from, to, nextStart, inWindow }) => {
    const n = inWindow(from, Math.min(to + 1500, nextStart), 'lease');
    if (n > 0)
      r.expectationMissed = `${n} lease fence(s) with etcd ${r.fault.latencyMs ?? 0} ms slower each way (inside the keep-alive timeout)`;
  },
  'etcd-slow-long': ({ r, from, to, nextStart, inWindow }) => {
    const n = inWindow(from, Math.min(to + 1000, nextStart), 'lease');
    if (n === 0 && r.servingAtStart > 0)
      r.expectationMissed = `no lease fence with etcd ${r.fault.latencyMs ?? 0} ms slower each way (past the keep-alive timeout)`;
  },
  'etcd-pause-short': ({ r, from, to, nextStart, inWindow }) => {
    const n = inWindow(from, Math.min(to + 1500, nextStart), 'lease');
    if (n > 0)
      r.expectationMissed = `${n} lease fence(s) during a ${r.fault.effectMs} ms etcd pause (shorter than the fence window)`;
  },
  'etcd-pause-long': ({ r, from, to, nextStart, inWindow }) => {
    const n = inWindow(from, Math.min(to + 1000, nextStart), 'lease');
    // Only a node that was serving can fence; with none serving (still recovering) there is nothing to see.
    if (n === 0 && r.servingAtStart > 0)
      r.expectationMissed = `no lease fence during a ${r.fault.effectMs} ms etcd pause (longer than the TTL)`;
  },
  'clock-jump-small': ({ r, from, to, nextStart, inWindow }) => {
    const n = inWindow(from, Math.min(to + 500, nextStart), 'clock-rollback', r.target);
    if (n > 0)
      r.expectationMissed = `${r.target} fenced on a ${(r.fault.clockOffsetSeconds ?? 0) * 1000} ms jump (within the 10 ms tolerance)`;
  },
  'clock-jump-large': ({ r, from, to, inWindow }) => {
    const n = inWindow(from, to, 'clock-rollback', r.target);
    if (n === 0 && r.target !== '-' && r.servingAtStart > 0)
      r.expectationMissed = `${r.target} did not fence on a ${r.fault.clockOffsetSeconds ?? 0} s jump back`;
  },
  'etcd-member-down': ({ r, nextStart, inWindow, outages, memberDowns }) => {
    const down = memberDowns.get(r);
    if (down === undefined) return;
    // A fence is read from the log a moment after it happens: 1.5 s past the member's start still counts.
    const leaseFences = inWindow(down.fromMs, Math.min(down.toMs + 1500, nextStart), 'lease');
    const failedCalls = outages.find((w) => w.window.label === `#${r.fault.index} ${r.fault.kind}`)?.failedCalls ?? 0;
    r.notes.push(`lease fences while down: ${leaseFences}; failed calls in window: ${failedCalls}`);
    r.expectationMissed = judgeMemberDown(leaseFences, failedCalls);
  },
};

/** Fence expectations, from the nodes' own log lines (one per fence, with its reason); notes each window's fences. */
function judgeFences(s: RunOutcome, fenceEvents: readonly FenceEvent[], outages: readonly OutageReport[]): void {
  const inWindow: FencesIn = (lo, hi, reason, name) =>
    fenceEvents.filter(
      (e) =>
        e.atMs >= lo &&
        e.atMs <= hi &&
        (reason === undefined || e.reason === reason) &&
        (name === undefined || e.name === name) &&
        e.source === 'guard',
    ).length;
  for (const r of s.records) {
    const from = s.loadStart + r.startedMs;
    const to = from + r.fault.effectMs;
    const next = s.records[s.records.indexOf(r) + 1];
    const nextStart = next === undefined ? s.loadStart + s.loadMs : s.loadStart + next.startedMs;
    r.notes.push(`fences in window: ${inWindow(from, nextStart)}`);
    FENCE_EXPECTATIONS[r.fault.kind]?.({ r, from, to, nextStart, inWindow, outages, memberDowns: s.memberDowns });
  }
}

/** Reads every record, checks the rules and the expectations, and builds the result. */
export async function judgeRun(o: ChaosOptions, s: RunOutcome): Promise<ChaosResult> {
  const all = await Promise.all(Array.from({ length: s.callerHomes.length }, (_, i) => readCallerRecords(s.dir, i)));
  const probeBlocks = await readBlocksFile(probeBlocksFile(s.dir), -1);
  // Every ID the embedded callers minted is checked with the nodes' (rules 1-3).
  const embeddedBlocks = (await s.embedded?.blocks()) ?? [];
  const blocks: ReceivedBlock[] = [...all.flatMap((c) => c.blocks), ...probeBlocks, ...embeddedBlocks];

  const receivedIds = expandBlocks(blocks);
  const { duplicates, handedOutDuplicates, handedOut } = checkRuleOne(all, receivedIds);
  // Rules 2 and 3 (rule 2 per region: a further region's slots are its own, src/regions.ts).
  const elsewhere = new Set(s.regions.flatMap((g) => g.fleet.incarnations.map((i) => i.url)));
  const holders = checkHolders(elsewhere.size === 0 ? blocks : blocks.filter((b) => !elsewhere.has(b.node)), [
    ...s.fleet.holdings,
    ...(s.embedded?.holdings ?? []),
  ]);
  const regions = regionsOf(o, s, all);
  const clock = checkClockBound(blocks, CLOCK_BOUND_MS, undefined, s.clockAllowances);

  // Rule 4, per fault window (times relative to the load start).
  const windows = faultWindows(s.records, s.loadMs);
  const timelines = all.map((c) => ({
    caller: c.caller,
    successMs: Array.from(c.timeline.successMs, (t) => t - s.loadStart),
    failureMs: c.timeline.failureMs.map((t) => t - s.loadStart),
  }));
  const outages = outageWindows(timelines, windows, s.loadMs);
  const duplicatesByFault = duplicates.duplicates === 0 ? [] : duplicatesPerWindow(receivedIds, windows, s.loadStart);

  const fenceEvents = s.fleet.fences;
  judgeFences(s, fenceEvents, outages);
  const cost = costOf(s, all, windows, timelines, fenceEvents);

  const perNodeMetrics = s.fleet.incarnations.map((i) => ({ name: i.name, metrics: i.metrics }));
  const fencesByReason: Record<string, number> = {};
  for (const e of fenceEvents) if (e.source === 'guard') fencesByReason[e.reason] = (fencesByReason[e.reason] ?? 0) + 1;

  const violations =
    duplicates.duplicates +
    handedOutDuplicates.duplicates +
    handedOut.invented +
    holders.violationCount +
    clock.violationCount +
    regionViolations(regions);
  return {
    seed: o.seed,
    kinds: o.kinds,
    netns: o.netns === true,
    serverMain: o.serverMain,
    serverMainFlag: o.serverMainFlag,
    previousServer: o.previousServer,
    nodeVersions: s.fleet.incarnations.map((i) => ({ name: i.name, version: i.version })),
    durationMs: o.durationMs,
    clockAllowances: s.clockAllowances,
    schedule: s.schedule,
    loadMs: s.loadMs,
    dir: s.dir,
    faults: s.records,
    skipped: s.skipped,
    duplicates,
    duplicatesByFault,
    handedOutDuplicates,
    handedOut,
    holders,
    clock,
    outages,
    callerCost: cost,
    metrics: sumNodeMetrics(perNodeMetrics.map((p) => p.metrics)),
    perNodeMetrics,
    fenceEvents: fenceEvents.length,
    fencesByReason,
    nodeProcesses: s.fleet.incarnations.length,
    supervisorRestarts: s.fleet.restarts(),
    spareRestarts: s.fleet.spareRestarts(),
    probeBlocks: probeBlocks.length,
    callersSummary: callersSummary(all, s.callerSummaries),
    embedded: embeddedSummary(s.embedded, embeddedBlocks),
    audit: s.audit,
    violations,
    expectationsMissed: s.records.filter((r) => r.expectationMissed !== undefined).length,
    safetyViolations: s.records.filter((r) => r.safetyViolation !== undefined).length,
    ...(regions !== undefined ? { regions } : {}),
  };
}

/** A run over regions: the failover table, the region-code check, rule 2 per further region (src/regions.ts). */
function regionsOf(o: ChaosOptions, s: RunOutcome, all: readonly CallerRecords[]): RegionsReport | undefined {
  if (s.regions.length === 0) return undefined;
  const nodeRegion = new Map<string, number>();
  for (const i of s.fleet.incarnations) nodeRegion.set(i.url, o.region);
  for (const g of s.regions) for (const i of g.fleet.incarnations) nodeRegion.set(i.url, g.code);
  return failoverReport(
    {
      records: s.records,
      outages: s.regionOutages,
      loadStart: s.loadStart,
      loadMs: s.loadMs,
      callers: all.map((records, i) => ({ records, home: s.callerHomes[i] ?? o.region })),
      nodeRegion,
      regionCodes: [o.region, ...s.regions.map((g) => g.code)],
      fences: new Map(s.regions.map((g) => [g.code, g.fleet.fences])),
    },
    s.regions,
    {
      code: o.region,
      etcdMembers: 3,
      nodes: s.fleet.positions.length,
      callers: s.callerHomes.flatMap((h, i) => (h === o.region ? [i] : [])),
    },
  );
}

/**
 * Issue 25: what the faults cost the callers, over the report's windows and the time outside any fault. Fences are
 * counted from the nodes' log lines (one per fence, with its reason and when it was read), as the fence
 * expectations are: the simplest accurate per-window count (the /metrics scrapes are 2 s apart, and a process's
 * counters vanish with it).
 */
function costOf(
  s: RunOutcome,
  all: readonly CallerRecords[],
  windows: readonly Window[],
  timelines: readonly { caller: number; successMs: number[]; failureMs: number[] }[],
  fenceEvents: readonly FenceEvent[],
): CallerCostReport {
  return callerCost({
    windows: windows.map((w, i) => ({ ...w, kind: i === 0 ? undefined : s.records[i - 1]?.fault.kind })),
    outside: outsideSpans(
      s.records.map((r) => ({
        startedMs: r.startedMs,
        endedMs: r.endedMs,
        windowMs: r.fault.windowMs,
        settleWaitMs: r.settleWaitMs ?? 0,
      })),
      s.loadMs,
    ),
    originMs: s.loadStart,
    loadMs: s.loadMs,
    latencies: all.map((c) => c.latencies),
    stats: all.map((c) => c.stats),
    timelines,
    fences: fenceEvents.filter((e) => e.source === 'guard'),
  });
}

/** Each caller's calls, IDs, failures and blocks (its own count of calls when it printed one). */
function callersSummary(
  all: readonly CallerRecords[],
  summaries: readonly CallerSummary[],
): ChaosResult['callersSummary'] {
  return all.map((c, i) => ({
    caller: c.caller,
    calls: summaries[i]?.calls ?? c.timeline.successMs.length,
    ids: c.handedOut.length,
    failed: c.failures.length,
    blocks: c.blocks.length,
  }));
}

/** The embedded callers' part of the result (undefined without embedded callers). */
function embeddedSummary(
  embedded: EmbeddedFleet | undefined,
  embeddedBlocks: readonly ReceivedBlock[],
): ChaosResult['embedded'] {
  if (embedded === undefined) return undefined;
  return {
    workers: embedded.workers,
    ...embedded.summary(),
    blocks: embeddedBlocks.length,
    ids: embeddedBlocks.reduce((n, b) => n + b.count, 0),
    faults: embedded.faults,
  };
}
