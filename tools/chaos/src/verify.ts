/**
 * The verifier: pure functions over what the callers recorded and what the nodes logged. Each one checks
 * one rule of issue 7 / docs/design.md §8 and returns counts plus a list of violations (empty: the rule held).
 */
import { DEFAULT_LAYOUT, type Layout } from '@idgen/core';

/** Violations kept in full per check; the rest are only counted (a broken run can produce millions). */
export const MAX_REPORTED = 20;

/** One `(first, count)` block a caller received from a node (docs/design.md §1: IDs of one ms are consecutive). */
export interface ReceivedBlock {
  /** Which caller received it. */
  readonly caller: number;
  /** The node that answered (its base URL: unique per node process in the chaos run). */
  readonly node: string;
  readonly first: bigint;
  readonly count: number;
  /** Wall-clock Unix ms at the caller when the response arrived. */
  readonly receivedMs: number;
}

/** One worker-slot holding, as a node logged it (`lease: alive` with worker, lease id and floor). */
export interface Holding {
  /** Base URL of the node process (matches {@link ReceivedBlock.node}). */
  readonly node: string;
  /** Readable name of the node process, e.g. `n2#3`. */
  readonly name: string;
  readonly worker: number;
  readonly leaseId: string;
  /** The holding mints strictly above this Unix ms (docs/design.md §5). */
  readonly floorMs: number;
  /** When the chaos tool saw the holding begin (its own wall clock, Unix ms): orders holders of a slot. */
  readonly seenMs: number;
}

// ---------------------------------------------------------------------------------------------- rule 1

/** Result of {@link findDuplicates}. */
export interface DuplicateReport {
  /** IDs checked. */
  readonly checked: number;
  /** IDs that appeared more than once, counted once per extra copy. */
  readonly duplicates: number;
  /** Up to {@link MAX_REPORTED} duplicated IDs. */
  readonly examples: readonly bigint[];
}

/** Rule 1: zero duplicates. Sorts `ids` in place (a typed-array sort: millions of IDs in well under a second). */
export function findDuplicates(ids: BigUint64Array): DuplicateReport {
  ids.sort();
  let duplicates = 0;
  const examples: bigint[] = [];
  for (let i = 1; i < ids.length; i++) {
    if (ids[i] === ids[i - 1]) {
      duplicates++;
      if (examples.length < MAX_REPORTED && examples[examples.length - 1] !== ids[i]) examples.push(ids[i] as bigint);
    }
  }
  return { checked: ids.length, duplicates, examples };
}

/**
 * Duplicates charged to the window (fault) in which their millisecond lies, for the report: which fault
 * produced them. `sortedIds` is sorted ascending (as {@link findDuplicates} leaves it); `windows` are in
 * wall ms relative to `originMs`. A duplicate outside every window is charged to `(none)`.
 */
export function duplicatesPerWindow(
  sortedIds: BigUint64Array,
  windows: readonly Window[],
  originMs: number,
  layout: Layout = DEFAULT_LAYOUT,
): { label: string; duplicates: number }[] {
  const counts = new Map<string, number>();
  for (let i = 1; i < sortedIds.length; i++) {
    if (sortedIds[i] !== sortedIds[i - 1]) continue;
    const at = layout.unixMsOf(sortedIds[i] as bigint) - originMs;
    const w = windows.find((x) => at >= x.startMs && at < x.endMs);
    const label = w?.label ?? '(none)';
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  return [...counts.entries()].map(([label, duplicates]) => ({ label, duplicates }));
}

/** Every ID of `blocks`, expanded, in one array (for {@link findDuplicates}). */
export function expandBlocks(blocks: readonly ReceivedBlock[]): BigUint64Array {
  let total = 0;
  for (const b of blocks) total += b.count;
  const out = new BigUint64Array(total);
  let i = 0;
  for (const b of blocks) {
    for (let k = 0; k < b.count; k++) out[i++] = b.first + BigInt(k);
  }
  return out;
}

/** Result of {@link checkHandedOut}. */
export interface HandedOutReport {
  readonly checked: number;
  /** IDs a caller's client handed out that no block it received contained: an invented ID. */
  readonly invented: number;
  readonly examples: readonly bigint[];
}

/**
 * The client never invents an ID (docs/design.md §7): every ID a caller's client handed out lies in a block that
 * caller received. `handedOut` is sorted in place.
 */
export function checkHandedOut(handedOut: BigUint64Array, blocks: readonly ReceivedBlock[]): HandedOutReport {
  handedOut.sort();
  const ranges = blocks
    .map((b) => [b.first, b.first + BigInt(b.count) - 1n] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  let invented = 0;
  const examples: bigint[] = [];
  let r = 0;
  for (const id of handedOut) {
    while (r < ranges.length && (ranges[r] as readonly [bigint, bigint])[1] < id) r++;
    const range = ranges[r];
    if (range === undefined || range[0] > id) {
      invented++;
      if (examples.length < MAX_REPORTED) examples.push(id);
    }
  }
  return { checked: handedOut.length, invented, examples };
}

// ---------------------------------------------------------------------------------------------- rule 2

/** The IDs one holding minted, as the callers received them. */
export interface HoldingSpan {
  readonly holding: Holding;
  readonly blocks: number;
  readonly ids: number;
  readonly minId: bigint;
  readonly maxId: bigint;
}

/** Result of {@link checkHolders}. */
export interface HolderReport {
  /** Worker slots that served IDs. */
  readonly slots: number;
  /** Holdings that served at least one received ID. */
  readonly holdings: number;
  /** Handovers checked: a holding whose slot had an earlier holding with IDs. */
  readonly handovers: number;
  readonly violations: readonly string[];
  readonly violationCount: number;
  /** Per slot, the holdings in the order they began. */
  readonly spans: ReadonlyMap<number, readonly HoldingSpan[]>;
}

/**
 * Rule 2: per worker slot, IDs from successive holders never overlap in time; the newcomer's first ID is
 * above every earlier holder's last (docs/design.md §5: never mint a timestamp a previous holder may have used).
 *
 * Each block is charged to the holding of its node and worker slot with the highest floor below the
 * block's first timestamp (a holding mints strictly above its floor). A block no holding of its node
 * covers is itself a violation (minted without a slot, or at or below the floor). Holdings of a slot are
 * then put in the order they began (`seenMs`), and each one's lowest ID must exceed the highest ID of
 * every earlier one. A stale block a paused holder minted after its fence deadline lands inside a later
 * holder's range and is caught here; one above its own later holding's floor would also be above every
 * intermediate holder's IDs (that floor is at least their last-ms), so it cannot collide.
 */
export function checkHolders(
  blocks: readonly ReceivedBlock[],
  holdings: readonly Holding[],
  layout: Layout = DEFAULT_LAYOUT,
): HolderReport {
  const violations: string[] = [];
  let violationCount = 0;
  const violate = (message: string): void => {
    violationCount++;
    if (violations.length < MAX_REPORTED) violations.push(message);
  };

  // Holdings of one node and slot, by floor ascending.
  const byNodeSlot = new Map<string, Holding[]>();
  for (const h of holdings) {
    const key = `${h.node}|${h.worker}`;
    const list = byNodeSlot.get(key) ?? [];
    list.push(h);
    byNodeSlot.set(key, list);
  }
  for (const list of byNodeSlot.values()) list.sort((a, b) => a.floorMs - b.floorMs);

  interface Acc {
    holding: Holding;
    blocks: number;
    ids: number;
    minId: bigint;
    maxId: bigint;
  }
  const acc = new Map<Holding, Acc>();
  for (const b of blocks) {
    const first = layout.decompose(b.first);
    const firstMs = layout.unixMsOf(b.first);
    const last = b.first + BigInt(b.count) - 1n;
    const candidates = byNodeSlot.get(`${b.node}|${first.worker}`) ?? [];
    let holding: Holding | undefined;
    for (const h of candidates) {
      if (h.floorMs < firstMs) holding = h;
    }
    if (holding === undefined) {
      violate(
        `block ${b.first}+${b.count} from ${b.node} (worker ${first.worker}, Unix ms ${firstMs}) matches no holding of that node: ` +
          (candidates.length === 0
            ? 'the node never logged holding that slot'
            : `at or below its floor ${candidates[0]?.floorMs}`),
      );
      continue;
    }
    const a = acc.get(holding);
    if (a === undefined) {
      acc.set(holding, { holding, blocks: 1, ids: b.count, minId: b.first, maxId: last });
    } else {
      a.blocks++;
      a.ids += b.count;
      if (b.first < a.minId) a.minId = b.first;
      if (last > a.maxId) a.maxId = last;
    }
  }

  const perSlot = new Map<number, Acc[]>();
  for (const a of acc.values()) {
    const list = perSlot.get(a.holding.worker) ?? [];
    list.push(a);
    perSlot.set(a.holding.worker, list);
  }
  let handovers = 0;
  const spans = new Map<number, HoldingSpan[]>();
  for (const [worker, list] of [...perSlot.entries()].sort((a, b) => a[0] - b[0])) {
    list.sort((a, b) => a.holding.seenMs - b.holding.seenMs || a.holding.floorMs - b.holding.floorMs);
    let highest: Acc | undefined;
    for (const a of list) {
      if (highest !== undefined) {
        handovers++;
        if (a.minId <= highest.maxId) {
          violate(
            `worker ${worker}: ${a.holding.name} (lease ${a.holding.leaseId}, floor ${a.holding.floorMs}) minted ${a.minId} ` +
              `(ms ${layout.unixMsOf(a.minId)}), not above ${highest.maxId} (ms ${layout.unixMsOf(highest.maxId)}) of the earlier ` +
              `holder ${highest.holding.name} (lease ${highest.holding.leaseId})`,
          );
        }
      }
      if (highest === undefined || a.maxId > highest.maxId) highest = a;
    }
    spans.set(
      worker,
      list.map((a) => ({ holding: a.holding, blocks: a.blocks, ids: a.ids, minId: a.minId, maxId: a.maxId })),
    );
  }
  return { slots: perSlot.size, holdings: acc.size, handovers, violations, violationCount, spans };
}

// ---------------------------------------------------------------------------------------------- rule 3

/**
 * A period in which the chaos run itself set a node's wall clock ahead of true time (issue 12's forward
 * jumps): that node's IDs may lead their arrival by `aheadMs` more than the bound. Mutable: `toMs` is set
 * when the clock is back (plus a moment for responses in flight).
 */
export interface ClockAllowance {
  /** Base URL of the node process. */
  readonly node: string;
  /** Wall ms (true time) from which, and until which, a block it sent is allowed the lead. */
  fromMs: number;
  toMs: number;
  readonly aheadMs: number;
}

/** Result of {@link checkClockBound}. */
export interface ClockBoundReport {
  readonly blocks: number;
  /** Blocks that led by more than the bound, within an injected forward jump's allowance. */
  readonly allowedAhead: number;
  /** Largest (ID timestamp − receive time) seen, ms; negative when every ID was older than its arrival. */
  readonly maxLeadMs: number;
  readonly violations: readonly string[];
  readonly violationCount: number;
}

/**
 * Rule 3: no ID carries a timestamp more than the clock bound ahead of the wall clock when it was received.
 *
 * Callers and nodes share one real clock on this machine, and an ID is received after it was minted, so a
 * correct node's IDs are never ahead of their arrival. What the rule catches is a node minting from a
 * clock ahead of true time (by more than the 10 ms bound chrony keeps, docs/design.md §3). The injected jumps are
 * not an excuse: jumps back make IDs older, never newer; a node that mints ahead after a jump back (for
 * instance by restoring a lower clock and then racing past it) is exactly what this rule must flag. The
 * one excuse is a forward jump the run made itself (`allowances`): while a node's clock is set ahead, and a
 * moment after, its IDs may lead by the offset on top of the bound (duplicates they cause are rules 1 and
 * 2's business). A block lies within one millisecond (its IDs are consecutive integers: docs/design.md §1); it is
 * checked at its last ID all the same.
 */
export function checkClockBound(
  blocks: readonly ReceivedBlock[],
  boundMs: number,
  layout: Layout = DEFAULT_LAYOUT,
  allowances: readonly ClockAllowance[] = [],
): ClockBoundReport {
  const violations: string[] = [];
  let violationCount = 0;
  let allowedAhead = 0;
  let maxLeadMs = -Infinity;
  const allowanceOf = (b: ReceivedBlock): number => {
    let ahead = 0;
    for (const a of allowances) {
      if (a.node === b.node && b.receivedMs >= a.fromMs && b.receivedMs <= a.toMs && a.aheadMs > ahead)
        ahead = a.aheadMs;
    }
    return ahead;
  };
  for (const b of blocks) {
    const lastMs = layout.unixMsOf(b.first + BigInt(b.count) - 1n);
    const lead = lastMs - b.receivedMs;
    if (lead > boundMs && lead <= boundMs + allowanceOf(b)) {
      allowedAhead++;
      continue;
    }
    if (lead > maxLeadMs) maxLeadMs = lead;
    if (lead > boundMs) {
      violationCount++;
      if (violations.length < MAX_REPORTED) {
        violations.push(
          `block ${b.first}+${b.count} from ${b.node} to caller ${b.caller}: last ID at ms ${lastMs}, ${lead} ms ahead of its arrival (${b.receivedMs}); bound ${boundMs} ms`,
        );
      }
    }
  }
  return {
    blocks: blocks.length,
    allowedAhead,
    maxLeadMs: maxLeadMs === -Infinity ? 0 : maxLeadMs,
    violations,
    violationCount,
  };
}

// ---------------------------------------------------------------------------------------------- rule 4

/** What one caller recorded over time: when each call succeeded, and when calls failed. */
export interface CallerTimeline {
  readonly caller: number;
  /** Wall ms of each successful call, ascending. */
  readonly successMs: Float64Array | readonly number[];
  /** Wall ms of each failed call. */
  readonly failureMs: readonly number[];
}

/** A window of the run charged to one fault (or to the warm-up: `label` says which). */
export interface Window {
  readonly label: string;
  readonly startMs: number;
  readonly endMs: number;
}

/** Rule 4's figures for one window. */
export interface OutageReport {
  readonly window: Window;
  /** Longest time any one caller went without a successful call, for gaps that began in this window. */
  readonly longestGapMs: number;
  /** Which caller saw it (−1 when no caller had a gap starting here). */
  readonly longestGapCaller: number;
  /** When that gap began. */
  readonly longestGapStartMs: number;
  /** Failed calls (all callers) in the window. */
  readonly failedCalls: number;
  /** Successful calls (all callers) in the window. */
  readonly calls: number;
}

/**
 * Rule 4: failed calls and the longest window without an ID, per fault. A gap between two successive
 * successful calls of one caller is charged to the window in which it began (the last success before an
 * outage is when the caller's buffer still covered it); a caller with no success after `endMs` of the run
 * is charged up to the end. Gaps of different callers are not merged: each caller is one application that
 * either got IDs or did not.
 */
export function outageWindows(
  timelines: readonly CallerTimeline[],
  windows: readonly Window[],
  runEndMs: number,
): OutageReport[] {
  return windows.map((w) => {
    let longestGapMs = 0;
    let longestGapCaller = -1;
    let longestGapStartMs = w.startMs;
    let failedCalls = 0;
    let calls = 0;
    for (const t of timelines) {
      const s = t.successMs;
      for (let i = 0; i < s.length; i++) {
        const at = s[i] as number;
        if (at >= w.startMs && at < w.endMs) calls++;
        if (at < w.startMs || at >= w.endMs) continue;
        const next = i + 1 < s.length ? (s[i + 1] as number) : runEndMs;
        const gap = next - at;
        if (gap > longestGapMs) {
          longestGapMs = gap;
          longestGapCaller = t.caller;
          longestGapStartMs = at;
        }
      }
      for (const f of t.failureMs) if (f >= w.startMs && f < w.endMs) failedCalls++;
    }
    return { window: w, longestGapMs, longestGapCaller, longestGapStartMs, failedCalls, calls };
  });
}
