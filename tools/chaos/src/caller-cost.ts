/**
 * What each fault costs a caller (issue 25 item 1): per fault window, per fault kind and for the time outside any
 * fault, the callers' call latency (p50 / p99 / max), the IDs their clients discarded and the hedges they sent, and
 * the nodes' fences by reason. Pure functions over what the callers recorded (`caller-N.latency`,
 * `caller-N.stats.jsonl`: records.ts) and the fence lines the nodes logged; the run merges them in run-verdict.ts and
 * the report prints them (report.ts).
 */
import { LATENCY_FIELDS, type StatsLine } from './records.js';
import { outageWindows, type CallerTimeline, type Window } from './verify.js';

/** A span of the run, ms from the load start, `[startMs, endMs)`. */
export interface Span {
  readonly startMs: number;
  readonly endMs: number;
}

/** Call latency over a set of calls: every call counted by its start, failed ones included. */
export interface LatencySummary {
  readonly calls: number;
  /** Of `calls`, those that failed (they end at the client's deadline or earlier). */
  readonly failed: number;
  /** Nearest-rank percentiles and the largest, ms (0 when there were no calls). */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /**
   * The longest the caller's own timer woke late before one of these calls (CPU starvation, GC on this machine):
   * a gap between IDs includes it, the call latency does not.
   */
  readonly callerLateMaxMs: number;
}

/** The growth of the callers' client counters over a set of spans, summed over the callers. */
export interface ClientCounts {
  /** IDs the clients' buffers dropped unused (too old, or taken for a call that gave up). */
  readonly discarded: number;
  readonly hedgesSent: number;
  readonly hedgesWon: number;
  /** Blocks of losing hedged answers, dropped unchecked (never handed out). */
  readonly hedgeBlocksDiscarded: number;
  /** Blocks the block checks refused (foreign region or replayed). */
  readonly refusedBlocks: number;
}

/** One fault window's (or the warm-up's, or the no-fault time's) cost to the callers. */
export interface WindowCost {
  readonly label: string;
  /** The fault kind, undefined for the warm-up and the time outside any fault. */
  readonly kind: string | undefined;
  readonly spans: readonly Span[];
  readonly latency: LatencySummary;
  readonly client: ClientCounts;
  /** Fence log lines of the nodes' guards (one per fence), by reason. */
  readonly fences: Readonly<Record<string, number>>;
}

/** One row of the table "what each fault costs a caller". */
export interface KindCost {
  /** A fault kind, or `(no fault)` for the time outside any fault. */
  readonly kind: string;
  readonly runs: number;
  readonly failedCalls: number;
  readonly longestGapMs: number;
  readonly latency: LatencySummary;
  readonly client: ClientCounts;
  readonly fences: Readonly<Record<string, number>>;
}

/** The whole of it, as the result carries it. */
export interface CallerCostReport {
  readonly windows: readonly WindowCost[];
  /** Every moment outside every fault's planned window (its effect and recovery): the callers' baseline. */
  readonly outside: WindowCost;
  /** Per fault kind, the no-fault row first. */
  readonly byKind: readonly KindCost[];
}

/** The label of the time outside any fault, in the table. */
export const NO_FAULT = '(no fault)';

/** Nearest-rank percentile `p` (0 … 100) of ascending `sorted`; 0 for no values. */
export function percentile(sorted: Float64Array | readonly number[], p: number): number {
  const n = sorted.length;
  if (n === 0) return 0;
  // The epsilon keeps a product like 99.9 % of 1000 (999.0000000000001 in floating point) at rank 999.
  const rank = Math.min(n, Math.max(1, Math.ceil((p / 100) * n - 1e-9)));
  return sorted[rank - 1] as number;
}

/**
 * p50 / p99 / max of `durations` (sorted here, in place), with `failed` of them failed calls and the callers' own
 * largest timer lateness `callerLateMaxMs`.
 */
export function summarizeLatency(durations: Float64Array, failed: number, callerLateMaxMs = 0): LatencySummary {
  durations.sort();
  return {
    calls: durations.length,
    failed,
    p50Ms: percentile(durations, 50),
    p99Ms: percentile(durations, 99),
    maxMs: durations.length === 0 ? 0 : (durations[durations.length - 1] as number),
    callerLateMaxMs,
  };
}

const inSpans = (at: number, spans: readonly Span[]): boolean => spans.some((s) => at >= s.startMs && at < s.endMs);

/**
 * The durations of every call whose start lies in `spans` (ms from `originMs`), over every caller's latency
 * records (records.ts: start wall ms, duration ms, ok, late ms), how many of them failed, and the largest lateness.
 */
export function durationsIn(
  latencies: readonly Float64Array[],
  spans: readonly Span[],
  originMs: number,
): { durations: Float64Array; failed: number; lateMaxMs: number } {
  const out: number[] = [];
  let failed = 0;
  let lateMaxMs = 0;
  for (const rec of latencies) {
    for (let i = 0; i + LATENCY_FIELDS <= rec.length; i += LATENCY_FIELDS) {
      if (!inSpans((rec[i] as number) - originMs, spans)) continue;
      out.push(rec[i + 1] as number);
      if (rec[i + 2] === 0) failed++;
      lateMaxMs = Math.max(lateMaxMs, rec[i + 3] as number);
    }
  }
  return { durations: Float64Array.from(out), failed, lateMaxMs };
}

type CounterName = Exclude<keyof StatsLine, 'atMs'>;

/** A counter's value at `atMs` (wall): the last line at or before it, 0 before the first. */
function valueAt(lines: readonly StatsLine[], atMs: number, name: CounterName): number {
  let v = 0;
  for (const l of lines) {
    if (l.atMs > atMs) break;
    v = l[name];
  }
  return v;
}

/**
 * How much the callers' client counters grew over `spans` (ms from `originMs`), summed over the callers. Each
 * caller's `lines` ascend; a counter is read at a span's ends as its last sample at or before them, so a count is
 * charged to a span at most one sampling interval late (records.ts: STATS_SAMPLE_MS).
 */
export function counterGrowth(
  stats: readonly (readonly StatsLine[])[],
  spans: readonly Span[],
  originMs: number,
): ClientCounts {
  const grow = (name: CounterName): number => {
    let sum = 0;
    for (const lines of stats)
      for (const s of spans)
        sum += valueAt(lines, originMs + s.endMs, name) - valueAt(lines, originMs + s.startMs, name);
    return sum;
  };
  return {
    discarded: grow('discarded'),
    hedgesSent: grow('hedgesSent'),
    hedgesWon: grow('hedgesWon'),
    hedgeBlocksDiscarded: grow('hedgeBlocksDiscarded'),
    refusedBlocks: grow('refusedForeignRegion') + grow('refusedReplayed'),
  };
}

/** Fence log lines (wall `atMs`) in `spans` (ms from `originMs`), by reason. */
export function fencesIn(
  events: readonly { readonly atMs: number; readonly reason: string }[],
  spans: readonly Span[],
  originMs: number,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const e of events) if (inSpans(e.atMs - originMs, spans)) out[e.reason] = (out[e.reason] ?? 0) + 1;
  return out;
}

/**
 * The time outside every fault's planned window: from each fault's start to the later of its planned window's end
 * (effect plus recovery, schedule.ts) and its undoing, and before each fault the time the run waited for the
 * previous one's recovery (`settleWaitMs`: a recovery that overran its plan is that fault's, not a baseline). What
 * remains of `[0, loadMs)` is the callers' baseline.
 */
export function outsideSpans(
  faults: readonly {
    readonly startedMs: number;
    readonly endedMs: number | undefined;
    readonly windowMs: number;
    readonly settleWaitMs?: number;
  }[],
  loadMs: number,
): Span[] {
  const busy = faults
    .map((f) => ({
      startMs: f.startedMs - (f.settleWaitMs ?? 0),
      endMs: Math.max(f.startedMs + f.windowMs, f.endedMs ?? f.startedMs),
    }))
    .sort((a, b) => a.startMs - b.startMs);
  const out: Span[] = [];
  let at = 0;
  for (const b of busy) {
    if (b.startMs > at) out.push({ startMs: at, endMs: Math.min(b.startMs, loadMs) });
    at = Math.max(at, b.endMs);
  }
  if (at < loadMs) out.push({ startMs: at, endMs: loadMs });
  return out.filter((s) => s.endMs > s.startMs);
}

/** What {@link callerCost} reads. */
export interface CallerCostInput {
  /** The report's windows (warm-up, then one per fault to the next one's start), ms from the load start. */
  readonly windows: readonly (Window & { readonly kind: string | undefined })[];
  /** The time outside any fault ({@link outsideSpans}). */
  readonly outside: readonly Span[];
  /** Wall ms of the load start. */
  readonly originMs: number;
  readonly loadMs: number;
  /** Per caller: latency records, client counter lines, and the rule-4 timeline (ms from the load start). */
  readonly latencies: readonly Float64Array[];
  readonly stats: readonly (readonly StatsLine[])[];
  readonly timelines: readonly CallerTimeline[];
  /** The guards' fence log lines (wall ms). */
  readonly fences: readonly { readonly atMs: number; readonly reason: string }[];
}

interface Measured {
  readonly cost: WindowCost;
  readonly durations: Float64Array;
}

function measure(i: CallerCostInput, label: string, kind: string | undefined, spans: readonly Span[]): Measured {
  const { durations, failed, lateMaxMs } = durationsIn(i.latencies, spans, i.originMs);
  const copy = durations.slice(); // summarizeLatency sorts; the kind's merge needs them all
  return {
    durations,
    cost: {
      label,
      kind,
      spans,
      latency: summarizeLatency(copy, failed, lateMaxMs),
      client: counterGrowth(i.stats, spans, i.originMs),
      fences: fencesIn(i.fences, spans, i.originMs),
    },
  };
}

function addCounts(a: ClientCounts, b: ClientCounts): ClientCounts {
  return {
    discarded: a.discarded + b.discarded,
    hedgesSent: a.hedgesSent + b.hedgesSent,
    hedgesWon: a.hedgesWon + b.hedgesWon,
    hedgeBlocksDiscarded: a.hedgeBlocksDiscarded + b.hedgeBlocksDiscarded,
    refusedBlocks: a.refusedBlocks + b.refusedBlocks,
  };
}

function addFences(a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>): Record<string, number> {
  const out: Record<string, number> = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = (out[k] ?? 0) + v;
  return out;
}

/**
 * Per window, for the time outside any fault, and per fault kind (its windows merged: the percentiles are over all
 * its calls, not an average of windows). Failed calls and the longest gap come from rule 4 (verify.ts's
 * outageWindows) over the same windows, so the table agrees with the report's rule-4 lines.
 */
export function callerCost(i: CallerCostInput): CallerCostReport {
  const measured = i.windows.map((w) => measure(i, w.label, w.kind, [{ startMs: w.startMs, endMs: w.endMs }]));
  const outside = measure(i, 'outside any fault', undefined, i.outside);
  const windowOutages = outageWindows(i.timelines, i.windows, i.loadMs);
  const outsideOutages = outageWindows(
    i.timelines,
    i.outside.map((s) => ({ label: NO_FAULT, ...s })),
    i.loadMs,
  );
  const noFault: KindCost = {
    kind: NO_FAULT,
    runs: 0,
    // By the call's start, as the latency: rule 4 charges a failure to its end, which for a call begun in a fault
    // can fall in a few ms of no-fault time between two windows.
    failedCalls: outside.cost.latency.failed,
    longestGapMs: outsideOutages.reduce((m, o) => Math.max(m, o.longestGapMs), 0),
    latency: outside.cost.latency,
    client: outside.cost.client,
    fences: outside.cost.fences,
  };
  const kinds = [...new Set(i.windows.map((w) => w.kind).filter((k): k is string => k !== undefined))].sort();
  const byKind = kinds.map((kind): KindCost => {
    const idx = i.windows.flatMap((w, n) => (w.kind === kind ? [n] : []));
    const parts = idx.map((n) => measured[n] as Measured);
    const all = new Float64Array(parts.reduce((n, p) => n + p.durations.length, 0));
    let at = 0;
    for (const p of parts) {
      all.set(p.durations, at);
      at += p.durations.length;
    }
    const zero: ClientCounts = { discarded: 0, hedgesSent: 0, hedgesWon: 0, hedgeBlocksDiscarded: 0, refusedBlocks: 0 };
    return {
      kind,
      runs: idx.length,
      failedCalls: idx.reduce((n, k) => n + (windowOutages[k]?.failedCalls ?? 0), 0),
      longestGapMs: idx.reduce((m, k) => Math.max(m, windowOutages[k]?.longestGapMs ?? 0), 0),
      latency: summarizeLatency(
        all,
        parts.reduce((n, p) => n + p.cost.latency.failed, 0),
        parts.reduce((m, p) => Math.max(m, p.cost.latency.callerLateMaxMs), 0),
      ),
      client: parts.reduce((c, p) => addCounts(c, p.cost.client), zero),
      fences: parts.reduce<Record<string, number>>((f, p) => addFences(f, p.cost.fences), {}),
    };
  });
  return { windows: measured.map((m) => m.cost), outside: outside.cost, byKind: [noFault, ...byKind] };
}
