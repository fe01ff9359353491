import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Etcd3, IKeyValue } from 'etcd3';
import { DEFAULT_LAYOUT, createLayout, type Layout, type LayoutRecord } from '@idgen/core';
import {
  DEFAULT_TTL_SECONDS,
  LeaseConfigError,
  etcdConnectionFromFlags,
  resolveConnection,
  type NamedValue,
} from '@idgen/lease';
import { HANDOVER_NODE_ID, RESTORED_NODE_ID, spareCodesOf } from '@idgen/lease/operator';
import {
  lastMsUpperBound,
  leaseKeys,
  parseLastMsRecord,
  parseLayoutRecord,
  parseRegionBinding,
  parseSpareCodeRecord,
  parseTenureRecord,
  regionBindingKey,
  spareKeys,
  type LastMsRecord,
  type RegionBindingRecord,
  type SpareCodeRecord,
  type Tenure,
  type TenureRecord,
} from '@idgen/lease/records';
import { CliError, isCliError, usageError } from './exit-codes.js';
import { openEtcdClient, unreachableAfter } from './etcd-state.js';
import type { Deadlines, EtcdConnection, EtcdFlags } from './options.js';
import { etcdConnection } from './options.js';

/** One region of a deployment file: its name and its etcd. */
export interface DeploymentRegion {
  readonly name: string;
  readonly connection: EtcdConnection;
}

/**
 * Reads `idgen audit --config` / `idgen whois --config`: `{"regions": [{"name", "etcd": [urls] | "a,b", "prefix"?,
 * "ca"?, "cert"?, "key"?, "user"?, "passwordFile"?}, …]}`. File paths are relative to the file. The connection rules
 * are @idgen/lease's (the flags' own); every problem is a usage error (exit 2) naming the region and the field.
 */
export function readDeploymentFile(path: string): DeploymentRegion[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw usageError(`--config ${path}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw usageError(`--config ${path}: not JSON (${(e as Error).message})`);
  }
  const regions = (doc as { regions?: unknown } | null)?.regions;
  if (!Array.isArray(regions) || regions.length === 0)
    throw usageError(`--config ${path}: field regions is not a non-empty array`);
  const base = dirname(resolve(path));
  const names = new Set<string>();
  return regions.map((r: unknown, i): DeploymentRegion => {
    const at = `--config ${path}: regions[${i}]`;
    if (typeof r !== 'object' || r === null || Array.isArray(r)) throw usageError(`${at} is not an object`);
    const o = r as Record<string, unknown>;
    const name = o['name'];
    if (typeof name !== 'string' || name === '') throw usageError(`${at}.name is not a non-empty string`);
    if (names.has(name)) throw usageError(`${at}.name ${JSON.stringify(name)} is listed twice`);
    names.add(name);
    const etcd = o['etcd'];
    const urls = Array.isArray(etcd) && etcd.every((u) => typeof u === 'string') ? etcd.join(',') : etcd;
    if (typeof urls !== 'string') throw usageError(`${at}.etcd is not a list of etcd URLs`);
    const field = (f: string, file: boolean): NamedValue | undefined => {
      const v = o[f];
      if (v === undefined) return undefined;
      if (typeof v !== 'string') throw usageError(`${at}.${f} is not a string`);
      return { value: file ? resolve(base, v) : v, name: `regions[${i}].${f}` };
    };
    try {
      const options = etcdConnectionFromFlags({
        etcd: { value: urls, name: `regions[${i}].etcd` },
        prefix: field('prefix', false),
        ca: field('ca', true),
        cert: field('cert', true),
        key: field('key', true),
        user: field('user', false),
        passwordFile: field('passwordFile', true),
      });
      const { prefix } = resolveConnection(options);
      return { name, connection: { options, keyPrefix: prefix === '/' ? '' : prefix } };
    } catch (e) {
      if (e instanceof LeaseConfigError) throw usageError(`${at} (${name}): ${e.problems.join('; ')}`);
      throw e;
    }
  });
}

/** The regions of `--config`, or the one etcd of `--etcd` (named "etcd"). */
export function deploymentOf(flags: EtcdFlags & { config?: string }): DeploymentRegion[] {
  if (flags.config !== undefined && flags.etcd !== undefined) throw usageError('give --config or --etcd, not both');
  if (flags.config !== undefined) return readDeploymentFile(flags.config);
  // --etcd, IDGEN_ETCD or etcdctl's ETCDCTL_ENDPOINTS: one region's etcd.
  if (flags.etcd !== undefined || (process.env['ETCDCTL_ENDPOINTS'] ?? '') !== '')
    return [{ name: 'etcd', connection: etcdConnection(flags) }];
  throw usageError('--config <deployment.json> is required (or --etcd for one region)');
}

/** One slot as one region's etcd records it. */
export interface SlotView {
  readonly code: number;
  readonly worker: number;
  readonly tenureKey: string;
  readonly tenures: TenureRecord | undefined;
  readonly lastMs: LastMsRecord | undefined;
  /** The lease the worker key is bound to now, if held. */
  readonly heldBy: string | undefined;
}

/** What one region's etcd holds, read at one revision. */
export interface RegionView {
  readonly name: string;
  readonly where: string;
  readonly prefix: string;
  readonly clusterId: string;
  readonly revision: string;
  readonly binding: RegionBindingRecord | undefined;
  readonly layoutRecord: (LayoutRecord & { spareCodes: readonly number[] }) | undefined;
  readonly layout: Layout;
  readonly spare: ReadonlyMap<number, SpareCodeRecord>;
  readonly slots: readonly SlotView[];
  /** Records that could not be read (each names its key and field), or absent ones that must be there. */
  readonly unreadable: readonly string[];
}

/** Reads one region's keys at one revision; an etcd without an answer within `timeoutMs` is an exit-3 CliError. */
async function readRegion(region: DeploymentRegion, d: Deadlines): Promise<RegionView> {
  const { timeoutMs } = d;
  const { options, keyPrefix: prefix } = region.connection;
  const where = `${region.name} (etcd ${options.endpoints.join(',')})`;
  const client: Etcd3 = await openEtcdClient(region.connection, d, { retryReads: true }).catch((e: unknown) => {
    // `r5 (etcd http://…): connection refused`, as a failed read says it.
    throw isCliError(e)
      ? new CliError(e.exitCode, `${region.name} ${e.message.replace(/^(etcd \S+?): /, '($1): ')}`)
      : e;
  });
  try {
    const res = await unreachableAfter(
      client
        .getAll()
        .prefix(`${prefix}/`)
        .options({ deadline: new Date(Date.now() + timeoutMs) })
        .exec(),
      timeoutMs,
      where,
    );
    const byKey = new Map<string, IKeyValue>(res.kvs.map((kv) => [kv.key.toString('utf8'), kv]));
    const text = (key: string): string | undefined => byKey.get(key)?.value.toString('utf8');
    const unreadable: string[] = [];
    const parse = <T>(fn: () => T): T | undefined => {
      try {
        return fn();
      } catch (e) {
        unreadable.push((e as Error).message);
        return undefined;
      }
    };

    const layoutKey = leaseKeys.layout(prefix);
    const layoutRaw = text(layoutKey);
    let layoutRecord: RegionView['layoutRecord'];
    let layout = DEFAULT_LAYOUT;
    if (layoutRaw === undefined) unreadable.push(`${layoutKey} is absent (no layout record)`);
    else
      parse(() => {
        const record = parseLayoutRecord(layoutKey, layoutRaw);
        layout = createLayout(record);
        layoutRecord = { ...record, spareCodes: spareCodesOf(layoutKey, layoutRaw, layout.maxRegion) };
      });

    const bindingKey = regionBindingKey(prefix);
    const bindingRaw = text(bindingKey);
    const binding =
      bindingRaw === undefined ? undefined : parse(() => parseRegionBinding(bindingKey, bindingRaw, layout.maxRegion));

    const spare = new Map<number, SpareCodeRecord>();
    for (let code = 0; code <= layout.maxRegion; code++) {
      const key = spareKeys.code(prefix, code);
      const raw = text(key);
      if (raw === undefined) continue;
      const record = parse(() => parseSpareCodeRecord(key, raw, layout.maxRegion));
      if (record !== undefined) spare.set(code, record);
    }

    const slots: SlotView[] = [];
    for (let code = 0; code <= layout.maxRegion; code++) {
      for (let worker = 0; worker <= layout.maxWorker; worker++) {
        const tenureKey = leaseKeys.tenures(prefix, code, worker);
        const lastKey = leaseKeys.lastMs(prefix, code, worker);
        const tenureRaw = text(tenureKey);
        const lastRaw = text(lastKey);
        const held = byKey.get(leaseKeys.worker(prefix, code, worker));
        if (tenureRaw === undefined && lastRaw === undefined && held === undefined) continue;
        slots.push({
          code,
          worker,
          tenureKey,
          tenures: tenureRaw === undefined ? undefined : parse(() => parseTenureRecord(tenureKey, tenureRaw)),
          lastMs: lastRaw === undefined ? undefined : parse(() => parseLastMsRecord(lastKey, lastRaw)),
          heldBy: held === undefined ? undefined : String(held.lease),
        });
      }
    }
    return {
      name: region.name,
      where,
      prefix,
      clusterId: res.header.cluster_id,
      revision: res.header.revision,
      binding,
      layoutRecord,
      layout,
      spare,
      slots,
      unreadable,
    };
  } finally {
    client.close();
  }
}

/** Reads every region at once; the regions that did not answer come back as their one-line reasons. */
export async function readDeployment(
  regions: readonly DeploymentRegion[],
  d: Deadlines,
): Promise<{ views: RegionView[]; unreachable: string[] }> {
  const settled = await Promise.allSettled(regions.map((r) => readRegion(r, d)));
  const views: RegionView[] = [];
  const unreachable: string[] = [];
  for (const s of settled) {
    if (s.status === 'fulfilled') views.push(s.value);
    else if (isCliError(s.reason)) unreachable.push(s.reason.message);
    else throw s.reason;
  }
  return { views, unreachable };
}

/** What an audit finding is about. */
export type FindingKind = 'binding' | 'double-loan' | 'overlap' | 'last-ms' | 'layout' | 'unreadable';

/** One violation, as one line. */
export interface Finding {
  readonly kind: FindingKind;
  readonly message: string;
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

/** Every rule of `idgen audit` over the regions read (apps/cli/README.md, docs/runbook.md "Auditing a deployment"). */
export function auditDeployment(views: readonly RegionView[]): Finding[] {
  const findings: Finding[] = [];
  const add = (kind: FindingKind, message: string): void => {
    findings.push({ kind, message });
  };

  for (const v of views) for (const u of v.unreadable) add('unreadable', `${v.name}: ${u}`);

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

  // Tenures: in each record, each starts above everything before it; across etcds, no two intervals of a slot meet.
  const intervals = new Map<string, { from: number; to: number; region: string; what: string }[]>();
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
        const to = tenureExtent(t, slot);
        above = Math.max(above, to);
        aboveWhat = describeTenure(t);
        const key = `${slot.code}/${slot.worker}`;
        intervals.set(key, [
          ...(intervals.get(key) ?? []),
          { from: t.firstMs, to, region: v.name, what: `${v.name}: ${describeTenure(t)}` },
        ]);
      }
      lastMsRule(v, slot, record, add);
    }
  }
  for (const [key, list] of intervals) {
    const sorted = [...list].sort((a, b) => a.from - b.from);
    for (let i = 1; i < sorted.length; i++) {
      const prev = sorted[i - 1] as (typeof sorted)[number];
      const cur = sorted[i] as (typeof sorted)[number];
      // Within one record the rule above already spoke; this catches two etcds' tenures of one slot (a spare code).
      if (prev.region === cur.region) continue;
      if (cur.from <= prev.to)
        add(
          'overlap',
          `slot ${key}: ${cur.what} starts at ${cur.from}, at or below ${prev.to}, the end of ${prev.what}`,
        );
    }
  }
  return findings;
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
