import { DEFAULT_LAYOUT, createLayout, type Layout, type LayoutRecord } from '@idgen/core';
import { leaseKeys, parseLastMsRecord, parseLayoutRecord } from './records.js';
import type { LastMsRecord, WorkerRecord } from './records.js';
import { parseRegionBinding, regionBindingKey, type RegionBindingRecord } from './region-binding.js';
import { parseSpareCodeRecord, spareCodesOf, spareKeys, type SpareCodeRecord } from './spare-codes.js';
import { parseTenureRecord, type TenureRecord } from './tenure-ledger.js';

/**
 * One region's etcd as the audit sees it (docs/runbook.md "Auditing a deployment"): every key under the deployment's
 * prefix, read at one revision by whoever can reach it (the `idgen` CLI, the chaos tool), parsed here into a
 * {@link RegionView}. Reading etcd is the caller's; everything from the key-values on is a pure function, so the CLI,
 * the chaos tool and a simulator judge a deployment with the same code (issue 34, item 2).
 */

/** One key as etcd returned it: the key, its value (UTF-8) and the lease it is bound to ("0": none). */
export interface EtcdKeyValue {
  readonly key: string;
  readonly value: string;
  readonly lease: string;
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
  /** The region's name in the deployment file. */
  readonly name: string;
  /** How messages name it: `r1 (etcd http://…)`. */
  readonly where: string;
  /** The key prefix ('' for the root). */
  readonly prefix: string;
  /** The cluster that answered the read (etcd's response header). */
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

/** What {@link regionViewOf} reads: one etcd's answer to a range over `{prefix}/`. */
export interface RegionRead {
  readonly name: string;
  readonly where: string;
  readonly prefix: string;
  readonly clusterId: string;
  readonly revision: string;
  readonly kvs: readonly EtcdKeyValue[];
}

/**
 * Parses one region's keys into a {@link RegionView}. Nothing throws: a record that does not parse is listed in
 * `unreadable` (the audit reports each), and the slots are enumerated with the layout record's layout (else
 * docs/design.md §1's default).
 */
export function regionViewOf(read: RegionRead): RegionView {
  const { prefix } = read;
  const byKey = new Map<string, EtcdKeyValue>(read.kvs.map((kv) => [kv.key, kv]));
  const text = (key: string): string | undefined => byKey.get(key)?.value;
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
        heldBy: held === undefined ? undefined : held.lease,
      });
    }
  }
  return {
    name: read.name,
    where: read.where,
    prefix,
    clusterId: read.clusterId,
    revision: read.revision,
    binding,
    layoutRecord,
    layout,
    spare,
    slots,
    unreadable,
  };
}

/**
 * Parses a worker record (`{prefix}/regions/{code}/workers/{worker}`) leniently, for tools that only show it (`idgen
 * leases`): `undefined` when it is not a JSON object with a `nodeId`; the other fields default.
 */
export function parseWorkerRecord(raw: string): WorkerRecord | undefined {
  try {
    const o = JSON.parse(raw) as Partial<Record<keyof WorkerRecord, unknown>>;
    if (typeof o !== 'object' || o === null || typeof o.nodeId !== 'string') return undefined;
    return {
      nodeId: o.nodeId,
      kind: o.kind === 'embedded' ? 'embedded' : 'service',
      address: typeof o.address === 'string' ? o.address : '',
      startedAt: typeof o.startedAt === 'string' ? o.startedAt : '',
    };
  } catch {
    return undefined;
  }
}
