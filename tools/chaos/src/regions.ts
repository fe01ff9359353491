/**
 * Chaos over regions (issue 25, item 2: `--regions N`). Region 1 is the run's usual one (its 3-member etcd, its fleet,
 * its callers and embedded callers); each further region (codes 2 … N) gets its own one-member etcd bound to its code
 * (`{prefix}/region`, what `idgen region init` writes: docs/design.md §5), its own pool of nodes started with its
 * `--region`, and its own callers. Every caller has a home region and the others as fallbacks, in code order
 * (`fallbackRegions`, docs/design.md §7), each found through its region's node list file.
 *
 * The kinds `region-pool-down` and `region-etcd-down` (src/faults/region-*.ts) take one of the further regions away
 * and record its loss and return here ({@link RegionOutage}); {@link failoverReport} then gives, per such fault and over
 * the callers whose home it hit, the time from the loss to the first ID from a fallback region and from the return to
 * the first ID from home again, the failed calls, and checks every block's region code against its node's region.
 */
import { decodeId } from '@idgen/core';
import { bindRegion, startEtcdCluster, type EtcdCluster, type ProcessHandle } from '@idgen/testing';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createNodeFleet, type FenceEvent, type NodeFleet } from './node-fleet.js';
import type { CallerRecords } from './records.js';
import type { FaultRecord } from './run.js';
import { checkHolders, type HolderReport, type ReceivedBlock } from './verify.js';

/** Nodes and worker slots of each further region (one pool of two: a `region-pool-down` takes both). */
export const REGION_NODES = 2;

/** Callers whose home is a further region, per region (at most `--callers`). */
export const REGION_CALLERS = 2;

/** One further region of the run. */
export interface RegionPart {
  readonly code: number;
  readonly cluster: EtcdCluster;
  readonly fleet: NodeFleet;
  /** The caller indexes whose home this region is (filled in as the callers start). */
  readonly callerIndexes: number[];
  callers: ProcessHandle[];
}

/** A region taken away by a fault: wall ms of its loss and of its return (undefined: never returned). */
export interface RegionOutage {
  readonly region: number;
  readonly lossMs: number;
  returnMs: number | undefined;
}

/** Starts one further region: its one-member etcd bound to `code`, then its nodes (`--region code`) until ready. */
export async function startRegion(o: {
  code: number;
  dir: string;
  serverMain: string;
  faketimeLib: string;
  leaseTtlSeconds: number;
  say: (line: string) => void;
}): Promise<RegionPart> {
  const cluster = await startEtcdCluster(1, { readyTimeoutMs: 60_000 });
  await bindRegion(cluster.endpoints[0] as string, o.code, undefined, { ttlCeilingSeconds: o.leaseTtlSeconds });
  const dir = join(o.dir, `region-${o.code}`);
  await mkdir(dir, { recursive: true });
  const fleet = createNodeFleet({
    serverMain: o.serverMain,
    faketimeLib: o.faketimeLib,
    dir,
    etcd: cluster.endpoints,
    region: o.code,
    nodes: REGION_NODES,
    slots: REGION_NODES,
    leaseTtlSeconds: o.leaseTtlSeconds,
    say: o.say,
  });
  await fleet.startAll();
  await fleet.waitReady(REGION_NODES, 90_000);
  o.say(`  region ${o.code}: etcd ${cluster.endpoints.join(', ')} bound to ${o.code}, ${REGION_NODES} nodes ready`);
  return { code: o.code, cluster, fleet, callerIndexes: [], callers: [] };
}

/** A caller's `--fallback CODE:FILE` flags: every region but its home, in code order. */
export function fallbackFlags(home: number, regions: readonly { code: number; nodesFile: string }[]): string[] {
  return regions.filter((r) => r.code !== home).flatMap((r) => ['--fallback', `${r.code}:${r.nodesFile}`]);
}

/** One row of the failover table: one region fault, over the callers whose home it hit. */
export interface FailoverRow {
  readonly label: string;
  readonly region: number;
  readonly callers: number;
  /** Loss → first ID from a fallback region, ms, per caller that got one (p50/p99/max over callers). */
  readonly failoverMs: readonly number[];
  /** Return → first ID from home again, ms, per caller that got one. */
  readonly returnMs: readonly number[];
  /** Callers that never got a fallback ID / never got home again in the window. */
  readonly noFailover: number;
  readonly noReturn: number;
  readonly failedCalls: number;
  /** Longest time one of those callers went without a successful call in the window, ms. */
  readonly longestGapMs: number;
  /** Blocks the hit callers got from a fallback region in the window. */
  readonly fallbackBlocks: number;
  /** The hit region's guard fences in the window, by reason. */
  readonly fences: Readonly<Record<string, number>>;
}

/** What the run over regions adds to the result. */
export interface RegionsReport {
  readonly regions: readonly { code: number; etcdMembers: number; nodes: number; callers: readonly number[] }[];
  readonly rows: readonly FailoverRow[];
  /** Blocks whose IDs carry another code than their node's region, or one neither home nor fallback (violations). */
  readonly wrongCode: number;
  readonly wrongCodeExamples: readonly string[];
  /** Blocks from a fallback region (any caller, whole run), each checked to carry that region's code. */
  readonly fallbackBlocksChecked: number;
  /** Rule 2 per further region (slots are per region: worker 0 of region 2 is not worker 0 of region 1). */
  readonly holders: readonly { region: number; report: HolderReport }[];
}

/** Percentile (nearest rank) of sorted values; 0 when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] as number;
}

/** What {@link failoverReport} reads. */
export interface FailoverInput {
  readonly records: readonly FaultRecord[];
  readonly outages: ReadonlyMap<FaultRecord, RegionOutage>;
  readonly loadStart: number;
  readonly loadMs: number;
  /** Every caller's records and its home region. */
  readonly callers: readonly { records: CallerRecords; home: number }[];
  /** Node URL → the region its process was started for. */
  readonly nodeRegion: ReadonlyMap<string, number>;
  readonly regionCodes: readonly number[];
  /** The guards' fences of each further region's nodes, by region code. */
  readonly fences: ReadonlyMap<number, readonly FenceEvent[]>;
}

/** The region code of an ID (the deployment's default layout, as the nodes and callers use). */
function regionOf(id: bigint): number {
  return decodeId(id).region;
}

/** One fault's row: the hit callers' first fallback block after the loss, first home block after the return. */
function rowOf(i: FailoverInput, r: FaultRecord, out: RegionOutage): FailoverRow {
  const next = i.records[i.records.indexOf(r) + 1];
  const windowEnd = i.loadStart + (next === undefined ? i.loadMs : next.startedMs);
  const hit = i.callers.filter((c) => c.home === out.region);
  const failoverMs: number[] = [];
  const returnMs: number[] = [];
  let failedCalls = 0;
  let longestGapMs = 0;
  let fallbackBlocks = 0;
  for (const c of hit) {
    const blocks = [...c.records.blocks].sort((a, b) => a.receivedMs - b.receivedMs);
    const inWindow = blocks.filter((b) => b.receivedMs >= out.lossMs && b.receivedMs < windowEnd);
    const away = inWindow.filter((b) => regionOf(b.first) !== c.home);
    fallbackBlocks += away.length;
    if (away[0] !== undefined) failoverMs.push(away[0].receivedMs - out.lossMs);
    const back = out.returnMs;
    const home =
      back === undefined ? undefined : inWindow.find((b) => b.receivedMs >= back && regionOf(b.first) === c.home);
    if (home !== undefined && back !== undefined) returnMs.push(home.receivedMs - back);
    failedCalls += c.records.failures.filter((f) => f.atMs >= out.lossMs && f.atMs < windowEnd).length;
    let last = out.lossMs;
    for (const t of c.records.timeline.successMs) {
      if (t < out.lossMs) continue;
      if (t >= windowEnd) break;
      longestGapMs = Math.max(longestGapMs, t - last);
      last = t;
    }
  }
  const fences: Record<string, number> = {};
  for (const e of i.fences.get(out.region) ?? [])
    if (e.source === 'guard' && e.atMs >= out.lossMs && e.atMs < windowEnd)
      fences[e.reason] = (fences[e.reason] ?? 0) + 1;
  const sort = (xs: number[]): number[] => xs.sort((a, b) => a - b);
  return {
    label: `#${r.fault.index} ${r.fault.kind}`,
    region: out.region,
    callers: hit.length,
    failoverMs: sort(failoverMs),
    returnMs: sort(returnMs),
    noFailover: hit.length - failoverMs.length,
    noReturn: hit.length - returnMs.length,
    failedCalls,
    longestGapMs,
    fallbackBlocks,
    fences,
  };
}

/** Every block's first and last ID must carry its node's region, which must be its caller's home or a fallback. */
function checkCodes(i: FailoverInput): { wrong: number; examples: string[]; fallbackChecked: number } {
  let wrong = 0;
  let fallbackChecked = 0;
  const examples: string[] = [];
  for (const c of i.callers) {
    for (const b of c.records.blocks) {
      const node = i.nodeRegion.get(b.node);
      const first = regionOf(b.first);
      const last = regionOf(b.first + BigInt(b.count - 1));
      if (node !== undefined && node !== c.home) fallbackChecked++;
      const ok = node !== undefined && first === node && last === node && i.regionCodes.includes(first);
      if (ok) continue;
      wrong++;
      if (examples.length < 10)
        examples.push(
          `caller ${c.records.caller} (home ${c.home}): block ${b.first}+${b.count} from ${b.node} (region ${node ?? '?'}) carries region ${first}`,
        );
    }
  }
  return { wrong, examples, fallbackChecked };
}

/** The regions' part of the result (see {@link RegionsReport}). */
export function failoverReport(
  i: FailoverInput,
  regions: readonly RegionPart[],
  mainRegion: { code: number; etcdMembers: number; nodes: number; callers: readonly number[] },
): RegionsReport {
  const rows = i.records.flatMap((r) => {
    const out = i.outages.get(r);
    return out === undefined ? [] : [rowOf(i, r, out)];
  });
  const codes = checkCodes(i);
  const holders = regions.map((g) => {
    const urls = new Set(g.fleet.incarnations.map((inc) => inc.url));
    const blocks: ReceivedBlock[] = i.callers.flatMap((c) => c.records.blocks.filter((b) => urls.has(b.node)));
    return { region: g.code, report: checkHolders(blocks, g.fleet.holdings) };
  });
  return {
    regions: [
      mainRegion,
      ...regions.map((g) => ({
        code: g.code,
        etcdMembers: g.cluster.members.length,
        nodes: g.fleet.positions.length,
        callers: g.callerIndexes,
      })),
    ],
    rows,
    wrongCode: codes.wrong,
    wrongCodeExamples: codes.examples,
    fallbackBlocksChecked: codes.fallbackChecked,
    holders,
  };
}

/** Violations the regions' part adds (wrong region codes, overlapping holders of a further region). */
export function regionViolations(r: RegionsReport | undefined): number {
  if (r === undefined) return 0;
  return r.wrongCode + r.holders.reduce((n, h) => n + h.report.violationCount, 0);
}

function fenceText(f: Readonly<Record<string, number>>): string {
  return (
    Object.entries(f)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none'
  );
}

/** The report's section "regions" and its failover table. */
export function formatRegions(r: RegionsReport): string[] {
  const ms = (xs: readonly number[]): string =>
    xs.length === 0
      ? '-'
      : `${percentile(xs, 0.5).toFixed(0)} / ${percentile(xs, 0.99).toFixed(0)} / ${percentile(xs, 1).toFixed(0)}`;
  const lines = [
    '',
    'regions (--regions; every caller falls back to the other regions, in code order):',
    ...r.regions.map(
      (g) =>
        `  region ${g.code}: etcd of ${g.etcdMembers} member(s), ${g.nodes} nodes, home of callers ${g.callers.join(', ')}`,
    ),
    'failover (callers whose home region was hit; failover: loss → first ID from a fallback region; return: region back → first ID from home; p50 / p99 / max ms over callers):',
    '  | fault | region | callers | failover ms | return ms | failed calls | longest gap ms | fallback blocks | fences (hit region) |',
    '  | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...r.rows.map(
      (w) =>
        `  | ${w.label} | ${w.region} | ${w.callers} | ${ms(w.failoverMs)}${w.noFailover > 0 ? ` (${w.noFailover} none)` : ''} | ${ms(w.returnMs)}${w.noReturn > 0 ? ` (${w.noReturn} not back)` : ''} | ${w.failedCalls} | ${w.longestGapMs.toFixed(0)} | ${w.fallbackBlocks} | ${fenceText(w.fences)} |`,
    ),
  ];
  if (r.rows.length === 0) lines.push('  (no region fault ran)');
  lines.push(
    `region codes: ${r.wrongCode === 0 ? 'OK' : 'VIOLATED'}: ${r.fallbackBlocksChecked} blocks from a fallback region, every block's first and last ID carry its node's region (${r.wrongCode} wrong)`,
    ...r.wrongCodeExamples.map((e) => `  ${e}`),
    ...r.holders.map(
      (h) =>
        `region ${h.region} successive holders: ${h.report.violationCount === 0 ? 'OK' : 'VIOLATED'} (${h.report.violationCount} overlaps)`,
    ),
  );
  return lines;
}
