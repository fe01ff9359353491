import { DEFAULT_CLOCK_BOUND_MS, DEFAULT_TTL_SECONDS } from './config.js';
import type { LastMsRecord } from './records.js';
import { regionBindingKey } from './region-binding.js';
import { RESTORED_NODE_ID } from './region-restore.js';
import type { RegionView, SlotView } from './region-view.js';
import { HANDOVER_NODE_ID } from './spare-codes.js';
import { lastMsUpperBound, type Tenure, type TenureRecord } from './tenure-ledger.js';
import { witnessExtent, type TenureWitnessEntry } from './tenure-witness.js';

/**
 * The deployment audit's rules (docs/runbook.md "Auditing a deployment", docs/design.md §5 and §7): pure functions
 * over the {@link RegionView}s read from a deployment's etcds (region-view.ts). `idgen audit` and `idgen whois` print
 * what they find; the chaos tool judges its runs with them (issue 34, item 2).
 */

/** What an audit finding is about. */
export type FindingKind = 'binding' | 'double-loan' | 'overlap' | 'last-ms' | 'layout' | 'unreadable';

/** One violation, as one line. */
export interface Finding {
  readonly kind: FindingKind;
  readonly message: string;
  /** For a cross-etcd overlap: the slot, the milliseconds both may have minted in, and the two holders named. */
  readonly overlap?: TenureOverlap;
}

/** Two tenures of one slot that may both have minted in `fromMs`…`toMs` (inclusive). */
export interface TenureOverlap {
  readonly code: number;
  readonly worker: number;
  readonly fromMs: number;
  readonly toMs: number;
  /** Each as `region: nodeId (kind, lease, firstMs…lastMs, end)`, the earlier tenure first. */
  readonly holders: readonly [string, string];
}

/** Nodes' markers in `last-ms` that are no holder's own (docs/design.md §5, §7): a later floor, never a mint. */
const MARKERS: ReadonlySet<string> = new Set([RESTORED_NODE_ID, HANDOVER_NODE_ID]);

/**
 * The highest millisecond a tenure may have minted in, as its etcd tells: a closed one's `lastMs`; an open one's
 * `last-ms` (when it is its own) + TTL, else nothing past its first millisecond yet.
 */
export function tenureExtent(t: Tenure, slot: SlotView, defaultTtlMs = DEFAULT_TTL_SECONDS * 1000): number {
  if (t.lastMs !== null) return t.lastMs;
  const own = slot.lastMs !== undefined && slot.lastMs.leaseId === t.leaseId ? slot.lastMs : undefined;
  return own === undefined ? t.firstMs - 1 : lastMsUpperBound({ ...own, released: false }, defaultTtlMs);
}

const describeTenure = (t: Tenure): string =>
  `${t.nodeId} (${t.kind}, lease ${t.leaseId}, ${t.firstMs}…${t.lastMs ?? 'open'}, ${t.end})`;

/**
 * Every rule of `idgen audit` over the regions read (apps/cli/README.md, docs/runbook.md "Auditing a deployment"), and
 * over the holders' journals when given (`witnesses`: tenure-witness.ts's `readTenureWitnesses`).
 */
export function auditDeployment(
  views: readonly RegionView[],
  witnesses: { readonly entries: readonly TenureWitnessEntry[]; readonly problems: readonly string[] } = {
    entries: [],
    problems: [],
  },
): Finding[] {
  const findings: Finding[] = [];
  const add = (kind: FindingKind, message: string): void => {
    findings.push({ kind, message });
  };

  for (const v of views) for (const u of v.unreadable) add('unreadable', `${v.name}: ${u}`);
  for (const p of witnesses.problems) add('unreadable', p);

  // Bindings: every etcd bound, in the cluster answering, to a code no other etcd is bound to.
  const byCode = new Map<number, string[]>();
  for (const v of views) {
    if (v.binding === undefined) {
      add('binding', `${v.where}: ${regionBindingKey(v.prefix)} is absent: never bound (idgen region init)`);
      continue;
    }
    if (v.binding.clusterId !== v.clusterId)
      add(
        'binding',
        `${v.where}: bound to code ${v.binding.code} in cluster ${v.binding.clusterId}, but answers from cluster ${v.clusterId} (restored or replaced: docs/runbook.md)`,
      );
    byCode.set(v.binding.code, [...(byCode.get(v.binding.code) ?? []), v.name]);
  }
  for (const [code, names] of byCode)
    if (names.length > 1) add('binding', `region code ${code} is bound in ${names.length} etcds: ${names.join(', ')}`);
  for (const v of views) foreignSlots(v, add);

  // Spare codes: lent, reclaiming or adopted in at most one region's etcd.
  const loans = new Map<number, string[]>();
  for (const v of views)
    for (const [code, r] of v.spare)
      if (r.state === 'lent' || r.state === 'reclaiming' || r.state === 'adopted')
        loans.set(code, [
          ...(loans.get(code) ?? []),
          `${v.name} (${r.state}${r.state === 'adopted' ? '' : ` to ${r.lentTo}`})`,
        ]);
  for (const [code, where] of loans)
    if (where.length > 1)
      add('double-loan', `spare code ${code} is on loan in ${where.length} etcds: ${where.join(', ')}`);
  // One registry: every mirror that names the registry it follows names the same one (docs/design.md §7).
  const registries = new Map<string, string[]>();
  for (const v of views)
    for (const r of v.spare.values())
      if (r.registry !== undefined) {
        const id = `cluster ${r.registry.clusterId} prefix ${r.registry.prefix}`;
        registries.set(id, [...(registries.get(id) ?? []), `${v.name} (code ${r.code})`]);
      }
  if (registries.size > 1)
    add(
      'double-loan',
      `the spare-code mirrors follow ${registries.size} registries, a deployment has one: ${[...registries]
        .map(([id, by]) => `${id}: ${by.join(', ')}`)
        .join('; ')}`,
    );

  // Layout records equal across etcds.
  const first = views.find((v) => v.layoutRecord !== undefined);
  for (const v of views) {
    if (first === undefined || v === first || v.layoutRecord === undefined) continue;
    const a = JSON.stringify(first.layoutRecord);
    const b = JSON.stringify(v.layoutRecord);
    if (a !== b) add('layout', `${v.name}'s layout record ${b} differs from ${first.name}'s ${a}`);
  }

  // Tenures: in each record, each starts above everything before it (the record's order); and no two tenures of a
  // slot on record in different etcds may both have minted in one millisecond, every pair compared (issue 31, item 6:
  // sorted neighbours alone miss a long tenure that overlaps a later one past a short one in between).
  const intervals = new Map<string, TenureInterval[]>();
  const closedByHolder = holderClosedExtents(witnesses.entries);
  for (const v of views) {
    for (const slot of v.slots) {
      const record = slot.tenures;
      if (record === undefined) continue;
      let above = record.compacted.maxLastMs;
      let aboveWhat = `${record.compacted.count} compacted tenure(s)`;
      for (const t of record.tenures) {
        if (t.code !== slot.code || t.worker !== slot.worker)
          add('overlap', `${v.name}: ${slot.tenureKey} lists a tenure of ${t.code}/${t.worker}: ${describeTenure(t)}`);
        if (t.firstMs <= above)
          add(
            'overlap',
            `${v.name}: slot ${slot.code}/${slot.worker}: tenure ${describeTenure(t)} starts at ${t.firstMs}, at or below ${above}, the end of ${aboveWhat}`,
          );
        // A tenure its holder's journal shows closed ended there, whatever a restored or successor's copy says.
        const to = Math.min(tenureExtent(t, slot), closedByHolder.get(tenureId(t)) ?? Number.POSITIVE_INFINITY);
        above = Math.max(above, to);
        aboveWhat = describeTenure(t);
        const key = `${slot.code}/${slot.worker}`;
        intervals.set(key, [...(intervals.get(key) ?? []), { from: t.firstMs, to, region: v.name, tenure: t }]);
      }
      lastMsRule(v, slot, record, add);
    }
  }
  // The holders' journals (tenure-witness.ts): each witnessed tenure against every tenure of its slot on record, its
  // own copy in etcd aside. A tenure a restored etcd no longer shows (or shows closed too early) is judged here.
  for (const { source, record } of witnesses.entries) {
    const t = record.tenure;
    const key = `${t.code}/${t.worker}`;
    intervals.set(key, [
      ...(intervals.get(key) ?? []),
      { from: t.firstMs, to: witnessExtent(record), region: `journal ${source}`, tenure: t, witness: true },
    ]);
  }
  for (const [key, list] of intervals) for (const f of overlapsOf(key, mergeCopies(list))) findings.push(f);
  return findings;
}

/** One tenure, wherever it is listed: its holder, lease and first millisecond. */
const tenureId = (t: Tenure): string => `${t.nodeId}|${t.leaseId}|${t.firstMs}`;

/**
 * The last millisecond of each tenure its holder closed in its own journal (released, fenced, reclaimed: written after
 * it stopped minting). An etcd's copy of the same tenure never reaches past it: a copy a restore brought back open
 * reaches to the restore's marks, and one a successor closed `expired` to its bound, both upper bounds where the journal
 * is the holder's own word (issue 32's simulator found the false alarms those bounds made). An open journal entry
 * bounds nothing: its refreshes are not awaited, so it may lag the holder's newest `last-ms`.
 */
function holderClosedExtents(entries: readonly TenureWitnessEntry[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const { record } of entries)
    if (record.tenure.end !== 'open') out.set(tenureId(record.tenure), witnessExtent(record));
  return out;
}

/** A tenure's own closing (or still open, its extent from its own `last-ms`): its record speaks for it. */
const selfJudged = (t: Tenure): boolean => t.end !== 'expired';

/**
 * One interval per tenure of the etcds' records: a tenure listed in several etcds (a snapshot restored onto another
 * cluster carries its copy) is one holder, not two. Its extent is what a record that its holder closed (or that shows
 * it open) says, the largest of those; when every copy was closed `expired` by a successor, each an upper bound from
 * the `last-ms` that etcd saw, the smallest: a restored copy closed by a new holder at the restore marker's bound must
 * not stretch the tenure over its holder's own later tenures on the live etcd. Journals stay apart (judged against
 * every other tenure, their own copies aside).
 */
function mergeCopies(list: readonly TenureInterval[]): TenureInterval[] {
  const byTenure = new Map<string, TenureInterval[]>();
  const out: TenureInterval[] = [];
  for (const i of list) {
    if (i.witness === true) {
      out.push(i);
      continue;
    }
    const id = tenureId(i.tenure);
    byTenure.set(id, [...(byTenure.get(id) ?? []), i]);
  }
  for (const copies of byTenure.values()) {
    const first = copies[0] as TenureInterval;
    if (copies.length === 1) {
      out.push(first);
      continue;
    }
    const own = copies.filter((c) => selfJudged(c.tenure));
    const to = own.length > 0 ? Math.max(...own.map((c) => c.to)) : Math.min(...copies.map((c) => c.to));
    const judged = own.length > 0 ? own : copies;
    const pick = judged.find((c) => c.to === to) ?? first;
    out.push({ ...pick, to, region: copies.map((c) => c.region).join(' and ') });
  }
  return out;
}

/** One tenure's interval on one etcd's record: the milliseconds in which its holder may have minted. */
interface TenureInterval {
  readonly from: number;
  readonly to: number;
  readonly region: string;
  readonly tenure: Tenure;
  /** From a holder's journal, not an etcd's record. */
  readonly witness?: boolean;
}

/**
 * One tenure seen twice, not two holders: its etcd record and its journal, or its record and the copy a snapshot
 * restored onto another cluster carries (the same node, lease and first millisecond).
 */
const sameTenure = (a: TenureInterval, b: TenureInterval): boolean =>
  a.tenure.leaseId === b.tenure.leaseId && a.tenure.firstMs === b.tenure.firstMs && a.tenure.nodeId === b.tenure.nodeId;

/**
 * Every pair of one slot's tenures from different etcds (or a holder's journal) whose intervals meet (`from` to `to`,
 * both inclusive; an empty interval, a claim that never minted, meets none). Pairs within one etcd's record are the
 * record order's rule; a tenure is not compared with its own copy (in its journal, or in a restored etcd).
 */
function overlapsOf(slot: string, list: readonly TenureInterval[]): Finding[] {
  const out: Finding[] = [];
  for (let i = 0; i < list.length; i++) {
    for (let j = i + 1; j < list.length; j++) {
      const a = list[i] as TenureInterval;
      const b = list[j] as TenureInterval;
      if (a.region === b.region || sameTenure(a, b)) continue;
      const fromMs = Math.max(a.from, b.from);
      const toMs = Math.min(a.to, b.to);
      if (fromMs > toMs) continue;
      const [first, second] = a.from <= b.from ? [a, b] : [b, a];
      const holders: [string, string] = [
        `${first.region}: ${describeTenure(first.tenure)}`,
        `${second.region}: ${describeTenure(second.tenure)}`,
      ];
      out.push({
        kind: 'overlap',
        message: `slot ${slot}: ${holders[0]} and ${holders[1]} may both have minted in ms ${fromMs}…${toMs}`,
        overlap: { code: first.tenure.code, worker: first.tenure.worker, fromMs, toMs, holders },
      });
    }
  }
  return out;
}

/**
 * Slots of a code the etcd neither serves nor borrows (see {@link auditDeployment}): an etcd bound to code C holds
 * records of C, and of spare codes lent to C (lent, being reclaimed, or reclaimed: the borrowers' records stay).
 * Anything else was written by a holder on the wrong region code (a node of a version before the binding, or one
 * pointed here by mistake), whose IDs may equal the real region's.
 */
function foreignSlots(v: RegionView, add: (kind: FindingKind, message: string) => void): void {
  if (v.binding === undefined) return;
  const borrowed = [...v.spare.values()]
    .filter((r) => r.state !== 'adopted' && r.lentTo === v.binding?.code)
    .map((r) => r.code);
  const allowed = new Set([v.binding.code, ...borrowed]);
  const foreign = new Map<number, number[]>();
  for (const s of v.slots) if (!allowed.has(s.code)) foreign.set(s.code, [...(foreign.get(s.code) ?? []), s.worker]);
  for (const [code, workers] of foreign)
    add(
      'binding',
      `${v.where}: bound to code ${v.binding.code}, but holds slot records of code ${code} (workers ${workers.join(',')}), which it neither serves nor borrows: a holder on the wrong region code`,
    );
}

/** No `last-ms` above what its tenure allowed (see {@link auditDeployment}). */
function lastMsRule(
  v: RegionView,
  slot: SlotView,
  record: TenureRecord,
  add: (kind: FindingKind, message: string) => void,
): void {
  const last = record.tenures[record.tenures.length - 1];
  const ms = slot.lastMs;
  if (last === undefined || ms === undefined || MARKERS.has(ms.nodeId)) return;
  // A claim in progress: the holder of the worker key wrote its first last-ms and has not yet put its tenure on
  // record. Holders write the two in one transaction (docs/design.md §5); this is for versions that wrote them apart,
  // and a record that could not be joined. With the key gone, no claim vouches for the record: it is reported.
  const claiming =
    ms.leaseId !== undefined && ms.leaseId === slot.heldBy && !record.tenures.some((t) => t.leaseId === ms.leaseId);
  if (claiming) return;
  const where = `${v.name}: slot ${slot.code}/${slot.worker}`;
  if (last.lastMs === null) {
    if (ms.leaseId !== last.leaseId)
      add(
        'last-ms',
        `${where}: last-ms (${ms.ms}, lease ${ms.leaseId ?? '?'}) is not the open tenure's: ${describeTenure(last)}`,
      );
    return;
  }
  // A fenced holder's tenure closes at its last minted millisecond; its own keep-alives may have recorded later clocks.
  if (last.end === 'fenced' && ms.leaseId === last.leaseId) return;
  if (ms.ms > last.lastMs)
    add(
      'last-ms',
      `${where}: last-ms ${ms.ms} (lease ${ms.leaseId ?? '?'}) is above ${last.lastMs}, what the last tenure allowed: ${describeTenure(last)}`,
    );
}

/** What `idgen whois` found for one ID. */
export interface WhoisAnswer {
  readonly region: string;
  readonly tenure: Tenure;
  readonly lastMs: number;
}

/** The tenure covering `ms` on slot `code/worker`, in any region's etcd; else why none is on record. */
export function whoisTenure(
  views: readonly RegionView[],
  code: number,
  worker: number,
  ms: number,
): { found: WhoisAnswer[]; compacted: string | undefined } {
  const found: WhoisAnswer[] = [];
  let compacted: string | undefined;
  for (const v of views) {
    const slot = v.slots.find((s) => s.code === code && s.worker === worker);
    if (slot?.tenures === undefined) continue;
    for (const t of slot.tenures.tenures) {
      const to = tenureExtent(t, slot);
      if (t.firstMs <= ms && ms <= to) found.push({ region: v.name, tenure: t, lastMs: to });
    }
    const c = slot.tenures.compacted;
    if (c.count > 0 && ms <= c.maxLastMs)
      compacted = `${v.name} folded ${c.count} older tenure(s) of the slot (up to ms ${c.maxLastMs}) into its record's compacted count`;
  }
  return { found, compacted };
}

/** How a `last-ms` record compares with the reader's clock (docs/design.md §5). */
export type LastMsVerdict = 'ok' | 'ahead' | 'poisoned';

/**
 * `ahead`: above now by more than the clock bound, but by no more than the writer's TTL plus the bound,
 * which is what a new holder writes while it waits out an unclean predecessor's floor (it records its
 * floor). `poisoned`: further ahead than any holder could have written: every later holder of the slot
 * would wait until then (after an unclean end) or mint above it, so it is flagged for an operator.
 */
export function judgeLastMs(record: LastMsRecord, nowMs: number): LastMsVerdict {
  const aheadMs = record.ms - nowMs;
  if (aheadMs <= DEFAULT_CLOCK_BOUND_MS) return 'ok';
  const ttlMs = Math.max(record.ttlMs ?? 0, DEFAULT_TTL_SECONDS * 1000);
  // Twice the bound: the writer's clock and this one may each be off by it.
  return aheadMs <= ttlMs + 2 * DEFAULT_CLOCK_BOUND_MS ? 'ahead' : 'poisoned';
}
