import type { LayoutRecord } from '@idgen/core';
import { CorruptRecordError, UnreadableSchemaError } from './errors.js';
import type { ServingNode } from './types.js';

/** The etcd keys of docs/design.md §5 under one prefix. */
export const leaseKeys = {
  layout: (prefix: string) => `${prefix}/layout`,
  worker: (prefix: string, region: number, worker: number) => `${prefix}/regions/${region}/workers/${worker}`,
  lastMs: (prefix: string, region: number, worker: number) => `${prefix}/regions/${region}/last-ms/${worker}`,
  node: (prefix: string, region: number, nodeId: string) => `${prefix}/regions/${region}/nodes/${nodeId}`,
  nodes: (prefix: string, region: number) => `${prefix}/regions/${region}/nodes/`,
  /** The slot's tenure record (tenure-ledger.ts): every holder's tenure, bounded. */
  tenures: (prefix: string, region: number, worker: number) => `${prefix}/regions/${region}/tenures/${worker}`,
} as const;

/**
 * `{prefix}/regions/{code}/last-ms/{worker}`: the highest millisecond the holder may have minted in.
 * `ttlMs` is the writer's lease TTL, so a reader with a shorter TTL still waits long enough (an addition to
 * the contract's fields; a record without it is read with the reader's TTL).
 */
export interface LastMsRecord {
  readonly ms: number;
  readonly released: boolean;
  readonly nodeId: string;
  /** The writer's etcd lease (decimal), so a holder knows a record of its own session when it finds one. */
  readonly leaseId?: string;
  readonly at: string;
  readonly ttlMs?: number;
}

/** `{prefix}/regions/{code}/workers/{worker}`: who holds the slot. */
export interface WorkerRecord {
  readonly nodeId: string;
  readonly kind: 'service' | 'embedded';
  readonly address: string;
  readonly startedAt: string;
}

/**
 * The schema of the etcd records (docs/design.md §5 "Record schema"): every JSON record may carry `"schema": N`, and
 * a record without the field is schema 1, what release 0.1.0 wrote. This release writes schema 1 (no field: its
 * records are byte for byte what 0.1.0 writes and reads) and reads up to {@link RECORD_SCHEMA_READ}. A release that
 * changes a record so that the release before it would misread it writes the next schema on it, after a release
 * that reads that schema has shipped; a node that meets a schema above what it reads refuses the record
 * ({@link UnreadableSchemaError}), never guesses.
 */
export const RECORD_SCHEMA_READ = 1;

/** A record's schema: 1 when it has no `schema` field; a field that is not a positive integer is garbage. */
function recordSchema(key: string, o: Record<string, unknown>, raw: string): number {
  const v = o['schema'];
  if (v === undefined) return 1;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
    throw new CorruptRecordError(key, 'field schema is not a positive integer', raw);
  }
  return v;
}

/**
 * Parses a record's JSON object; anything else throws {@link CorruptRecordError} naming the key, and a record of a
 * schema this release cannot read throws {@link UnreadableSchemaError} (every record parser starts here).
 */
export function parseJsonObject(key: string, raw: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new CorruptRecordError(key, 'not JSON', raw);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CorruptRecordError(key, 'not a JSON object', raw);
  }
  const o = value as Record<string, unknown>;
  const schema = recordSchema(key, o, raw);
  if (schema > RECORD_SCHEMA_READ) throw new UnreadableSchemaError(key, schema, RECORD_SCHEMA_READ, raw);
  return o;
}

const LAYOUT_FIELDS = ['epochMs', 'timestampBits', 'regionBits', 'workerBits', 'sequenceBits'] as const;

/** Parses the layout record; garbage throws {@link CorruptRecordError}. */
export function parseLayoutRecord(key: string, raw: string): LayoutRecord {
  const o = parseJsonObject(key, raw);
  for (const f of LAYOUT_FIELDS) {
    const v = o[f];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
      throw new CorruptRecordError(key, `field ${f} is not a non-negative integer`, raw);
    }
  }
  return {
    epochMs: o['epochMs'] as number,
    timestampBits: o['timestampBits'] as number,
    regionBits: o['regionBits'] as number,
    workerBits: o['workerBits'] as number,
    sequenceBits: o['sequenceBits'] as number,
  };
}

/** Parses a `last-ms` record; garbage throws {@link CorruptRecordError} (the caller refuses that slot). */
export function parseLastMsRecord(key: string, raw: string): LastMsRecord {
  const o = parseJsonObject(key, raw);
  const ms = o['ms'];
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 0) {
    throw new CorruptRecordError(key, 'field ms is not a non-negative integer (Unix ms)', raw);
  }
  if (typeof o['released'] !== 'boolean') throw new CorruptRecordError(key, 'field released is not a boolean', raw);
  const ttlMs = o['ttlMs'];
  if (ttlMs !== undefined && (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs < 0)) {
    throw new CorruptRecordError(key, 'field ttlMs is not a non-negative integer', raw);
  }
  const leaseId = o['leaseId'];
  const base: LastMsRecord = {
    ms,
    released: o['released'] as boolean,
    nodeId: typeof o['nodeId'] === 'string' ? o['nodeId'] : '',
    ...(typeof leaseId === 'string' ? { leaseId } : {}),
    at: typeof o['at'] === 'string' ? o['at'] : '',
  };
  return ttlMs === undefined ? base : { ...base, ttlMs };
}

/** Parses a worker record leniently (it is only shown in messages); garbage gives a note, never a throw. */
export function describeWorkerHolder(raw: string | undefined): string {
  if (raw === undefined) return 'released meanwhile';
  try {
    const o = JSON.parse(raw) as unknown;
    if (typeof o === 'object' && o !== null && typeof (o as { nodeId?: unknown }).nodeId === 'string') {
      return (o as { nodeId: string }).nodeId;
    }
  } catch {
    // fall through
  }
  return `unreadable holder record ${JSON.stringify(raw.slice(0, 60))}`;
}

/** Parses a discovery node record; garbage throws {@link CorruptRecordError}. */
export function parseServingNode(key: string, raw: string): ServingNode {
  const o = parseJsonObject(key, raw);
  const { nodeId, region, worker, address, startedAt } = o;
  if (typeof nodeId !== 'string' || nodeId === '')
    throw new CorruptRecordError(key, 'field nodeId is not a string', raw);
  if (typeof region !== 'number' || !Number.isSafeInteger(region))
    throw new CorruptRecordError(key, 'field region is not an integer', raw);
  if (typeof worker !== 'number' || !Number.isSafeInteger(worker))
    throw new CorruptRecordError(key, 'field worker is not an integer', raw);
  if (typeof address !== 'string') throw new CorruptRecordError(key, 'field address is not a string', raw);
  return { nodeId, region, worker, address, startedAt: typeof startedAt === 'string' ? startedAt : '' };
}

/**
 * The floor for a new holder of a slot (docs/design.md §5): never mint at or below it.
 * - no record: the slot was never minted in (a holder writes `last-ms` before it mints): the epoch − 1;
 * - clean release: its millisecond;
 * - unclean end: its millisecond + TTL + clock bound, because the previous holder may have minted until
 *   `last-ms + TTL` on its own clock, and clocks differ by up to the bound. The TTL is the larger of the
 *   writer's (if recorded) and the reader's: never assume a floor lower than the truth.
 */
export function computeFloor(
  record: LastMsRecord | undefined,
  o: { ttlMs: number; clockBoundMs: number; epochMs: number },
): number {
  if (record === undefined) return o.epochMs - 1;
  if (record.released) return record.ms;
  return record.ms + Math.max(o.ttlMs, record.ttlMs ?? 0) + o.clockBoundMs;
}
