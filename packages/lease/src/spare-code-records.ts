import type { Etcd3 } from 'etcd3';
import type { Layout, LayoutRecord } from '@idgen/core';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import type { KeyRead } from './etcd-client.js';
import { CorruptRecordError, LeaseError } from './errors.js';
import { leaseKeys, parseJsonObject, parseLayoutRecord } from './records.js';
import type { RegistryIdentity } from './spare-registry.js';

/**
 * Spare region codes, lent and reclaimed across clusters (docs/design.md §7).
 *
 * `{prefix}/spare-codes/{code}` in one region's etcd:
 * - `lent` (in the borrowing region's etcd): that region's callers with `borrowSpare` may claim slots under the code;
 * - `reclaiming`: no new claims (every claim compares the record's mod revision), holders give their slot back at
 *   their next `last-ms` refresh (that write compares it too);
 * - `reclaimed`: every slot under the code was released or expired and the handover was exported; nothing here may
 *   claim under the code again;
 * - `adopted` (in the new region's etcd): the handover's `last-ms` records were written first; nodes may run on it.
 *
 * Every record here mirrors the deployment's spare-code registry (`{registry-prefix}/spare-registry/{code}`,
 * ./spare-registry.ts): lend, reclaim and adopt are decided by a transaction there first, and each mirror records the
 * registry's mod revision it follows (`registryRevision`), so two regions' etcds can never both be told to borrow a code.
 *
 * A node checks at boot ({@link checkRegionCode}): a code recorded `lent`, `reclaiming` or `reclaimed` here, or a spare
 * code (the layout record's `spareCodes`, default 5 and above) with no `adopted` record, is refused.
 */

export type SpareCodeState = 'lent' | 'reclaiming' | 'reclaimed' | 'adopted';
const STATES: readonly SpareCodeState[] = ['lent', 'reclaiming', 'reclaimed', 'adopted'];

/** `{prefix}/spare-codes/{code}`. */
interface SpareCodeRecordFields {
  readonly code: number;
  /** ISO time of the last change. */
  readonly at: string;
  /**
   * The mod revision of the registry record (`{registry-prefix}/spare-registry/{code}`) this mirror follows; absent
   * on records written before the registry.
   */
  readonly registryRevision?: string;
  /**
   * The registry this mirror follows (its etcd's cluster ID and prefix): a deployment has one, and a step decided in
   * another is refused here (docs/design.md §7). Absent on records written before it was recorded.
   */
  readonly registry?: RegistryIdentity;
}

/** A loan of the code, in the lending region's etcd: `lent`, then `reclaiming` and `reclaimed` when it is taken back. */
export interface SpareCodeLoan extends SpareCodeRecordFields {
  readonly state: 'lent' | 'reclaiming' | 'reclaimed';
  /** The borrowing region. */
  readonly lentTo: number;
}

/** The code adopted by a new region, in that region's etcd: where the handover came from and the highest floor it carried. */
export interface SpareCodeAdoption extends SpareCodeRecordFields {
  readonly state: 'adopted';
  readonly adoptedFrom: {
    readonly lentTo: number;
    readonly reclaimedAt: string;
    readonly workers: number;
    readonly maxLastMs: number;
  };
}

/** `{prefix}/spare-codes/{code}`, one of its two shapes by `state`. */
export type SpareCodeRecord = SpareCodeLoan | SpareCodeAdoption;

/** A spare-code record as read, with its mod revision (what a claim under it compares). */
export interface SpareCodeEntry {
  readonly key: string;
  readonly record: SpareCodeRecord;
  readonly modRevision: string;
}

/** The codes that are spares by default: 5 and above (five regions in use, docs/design.md §1). */
export const DEFAULT_REGIONS_IN_USE = 5;

export const spareKeys = {
  code: (prefix: string, code: number) => `${prefix}/spare-codes/${code}`,
  all: (prefix: string) => `${prefix}/spare-codes/`,
  workers: (prefix: string, code: number) => `${prefix}/regions/${code}/workers/`,
  lastMsAll: (prefix: string, code: number) => `${prefix}/regions/${code}/last-ms/`,
} as const;

/** Thrown when a spare-code operation or a boot check must refuse; never retryable. */
export class SpareCodeError extends LeaseError {
  constructor(message: string) {
    super('spare-code', message, false);
    this.name = 'SpareCodeError';
  }
}

export function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v);
}

/** Parses `{prefix}/spare-codes/{code}`; anything unexpected throws {@link CorruptRecordError} naming the field. */
export function parseSpareCodeRecord(key: string, raw: string, maxRegion = 7): SpareCodeRecord {
  const o = parseJsonObject(key, raw);
  const code = o['code'];
  const fromKey = Number(key.slice(key.lastIndexOf('/') + 1));
  if (!isInt(code) || code < 0 || code > maxRegion)
    throw new CorruptRecordError(key, `field code is not a region code 0-${maxRegion}`, raw);
  if (code !== fromKey) throw new CorruptRecordError(key, `field code ${code} does not match the key`, raw);
  const state = o['state'];
  if (typeof state !== 'string' || !STATES.includes(state as SpareCodeState)) {
    throw new CorruptRecordError(key, `field state is not one of ${STATES.join(', ')}`, raw);
  }
  const at = typeof o['at'] === 'string' ? o['at'] : '';
  const registryRevision = o['registryRevision'];
  if (registryRevision !== undefined && (typeof registryRevision !== 'string' || !/^[0-9]+$/.test(registryRevision)))
    throw new CorruptRecordError(key, 'field registryRevision is not a decimal revision', raw);
  const registry = o['registry'];
  let follows: RegistryIdentity | undefined;
  if (registry !== undefined) {
    const g = registry as Record<string, unknown> | null;
    if (typeof g !== 'object' || g === null || typeof g['clusterId'] !== 'string' || typeof g['prefix'] !== 'string')
      throw new CorruptRecordError(key, 'field registry needs strings clusterId and prefix', raw);
    follows = { clusterId: g['clusterId'], prefix: g['prefix'] };
  }
  const base: SpareCodeRecordFields = {
    code,
    at,
    ...(registryRevision === undefined ? {} : { registryRevision }),
    ...(follows === undefined ? {} : { registry: follows }),
  };
  if (state !== 'adopted') {
    const lentTo = o['lentTo'];
    if (!isInt(lentTo) || lentTo < 0 || lentTo > maxRegion || lentTo === code) {
      throw new CorruptRecordError(key, `field lentTo is not a region code 0-${maxRegion} other than ${code}`, raw);
    }
    return { ...base, state: state as SpareCodeLoan['state'], lentTo };
  }
  const from = o['adoptedFrom'];
  if (typeof from !== 'object' || from === null) throw new CorruptRecordError(key, 'field adoptedFrom is missing', raw);
  const f = from as Record<string, unknown>;
  if (!isInt(f['lentTo']) || !isInt(f['workers']) || !isInt(f['maxLastMs'])) {
    throw new CorruptRecordError(key, 'field adoptedFrom needs integers lentTo, workers, maxLastMs', raw);
  }
  return {
    ...base,
    state,
    adoptedFrom: {
      lentTo: f['lentTo'],
      reclaimedAt: typeof f['reclaimedAt'] === 'string' ? f['reclaimedAt'] : '',
      workers: f['workers'],
      maxLastMs: f['maxLastMs'],
    },
  };
}

/**
 * The spare codes of a deployment: the layout record's optional `spareCodes` (a list of region codes), else every
 * code from 5 up ({@link DEFAULT_REGIONS_IN_USE}). Garbage in `spareCodes` throws {@link CorruptRecordError}.
 */
export function spareCodesOf(layoutKey: string, layoutRaw: string | undefined, maxRegion: number): number[] {
  const defaults = (): number[] => {
    const out: number[] = [];
    for (let c = DEFAULT_REGIONS_IN_USE; c <= maxRegion; c++) out.push(c);
    return out;
  };
  if (layoutRaw === undefined) return defaults();
  const o = parseJsonObject(layoutKey, layoutRaw);
  const list = o['spareCodes'];
  if (list === undefined) return defaults();
  if (
    !Array.isArray(list) ||
    list.some((c) => !isInt(c) || c < 0 || c > maxRegion) ||
    new Set(list).size !== list.length
  ) {
    throw new CorruptRecordError(
      layoutKey,
      `field spareCodes is not a list of distinct region codes 0-${maxRegion}`,
      layoutRaw,
    );
  }
  return [...(list as number[])].sort((a, b) => a - b);
}

export interface Io {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
}

export async function getKey(io: Io, key: string): Promise<KeyRead | undefined> {
  const r = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key}`,
  );
  return firstKey(r.kvs);
}

export async function getPrefix(io: Io, prefix: string): Promise<{ key: string; read: KeyRead }[]> {
  const r = await withTimeout(
    io.client.getAll().prefix(prefix).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `listing ${prefix}`,
  );
  return r.kvs.map((kv) => ({ key: kv.key.toString('utf8'), read: firstKey([kv]) as KeyRead }));
}

/** The deployment's spare codes and layout as this etcd records them. */
export async function readSpareSet(
  io: Io,
  layout: Layout,
): Promise<{ codes: number[]; layoutRecord: LayoutRecord | undefined }> {
  const key = leaseKeys.layout(io.prefix);
  const raw = (await getKey(io, key))?.value;
  const layoutRecord = raw === undefined ? undefined : parseLayoutRecord(key, raw);
  return { codes: spareCodesOf(key, raw, layout.maxRegion), layoutRecord };
}

/** Reads one spare-code record; `undefined` when absent; garbage throws {@link CorruptRecordError}. */
export async function readSpareCode(io: Io & { layout: Layout }, code: number): Promise<SpareCodeEntry | undefined> {
  const key = spareKeys.code(io.prefix, code);
  const read = await getKey(io, key);
  if (read === undefined) return undefined;
  return { key, record: parseSpareCodeRecord(key, read.value, io.layout.maxRegion), modRevision: read.modRevision };
}

/** Every spare-code record under the prefix; garbage throws {@link CorruptRecordError} naming the key. */
export async function listSpareCodes(io: Io & { layout: Layout }): Promise<SpareCodeEntry[]> {
  const all = await getPrefix(io, spareKeys.all(io.prefix));
  return all
    .map(({ key, read }) => ({
      key,
      record: parseSpareCodeRecord(key, read.value, io.layout.maxRegion),
      modRevision: read.modRevision,
    }))
    .sort((a, b) => a.record.code - b.record.code);
}

/**
 * Every readable spare-code record, and a line for each unreadable one (the lease skips those: a garbage record
 * lends nothing, and must not stop a caller whose own range still has room).
 */
export async function readSpareCodesLeniently(
  io: Io & { layout: Layout },
): Promise<{ entries: SpareCodeEntry[]; unreadable: string[] }> {
  const entries: SpareCodeEntry[] = [];
  const unreadable: string[] = [];
  for (const { key, read } of await getPrefix(io, spareKeys.all(io.prefix))) {
    try {
      entries.push({
        key,
        record: parseSpareCodeRecord(key, read.value, io.layout.maxRegion),
        modRevision: read.modRevision,
      });
    } catch (e) {
      unreadable.push((e as Error).message);
    }
  }
  return { entries, unreadable };
}

/** The worker keys under a code (`{prefix}/regions/{code}/workers/`): who still holds a slot there. */
export async function heldSlotsUnder(io: Io, code: number): Promise<{ worker: number; holder: string }[]> {
  const prefix = spareKeys.workers(io.prefix, code);
  return (await getPrefix(io, prefix)).map(({ key, read }) => ({
    worker: Number(key.slice(prefix.length)),
    holder: read.value,
  }));
}

/**
 * Boot check (docs/design.md §7): may a node or an embedded caller of this etcd run on `region` as its own code?
 * Refuses (throws {@link SpareCodeError}) when this etcd records the code as lent out (`lent`, `reclaiming`,
 * `reclaimed`), or when the code is a spare (layout record `spareCodes`) that this etcd has not adopted.
 */
