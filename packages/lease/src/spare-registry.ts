import type { Etcd3 } from 'etcd3';
import { deadlineIn, firstKey, rangeValue, withTimeout } from './etcd-client.js';
import { CorruptRecordError } from './errors.js';
import { parseJsonObject } from './records.js';

/**
 * The spare-code registry (docs/design.md §7): the one etcd the whole deployment names as the keeper of its spare
 * codes (`--registry`; in practice one region's etcd, or a small etcd of its own). `{prefix}/spare-registry/{code}` is
 * the code's state for every region at once: lend, reclaim and adopt are decided by a transaction there first, and
 * only then mirrored into a region's own `{prefix}/spare-codes/{code}` (which borrowers and the boot check read).
 * No record: the code is free (a spare never lent).
 */

export type RegistryState = 'lent' | 'reclaiming' | 'reclaimed' | 'adopted';
const STATES: readonly RegistryState[] = ['lent', 'reclaiming', 'reclaimed', 'adopted'];

/** What `reclaimed` hands over: the per-worker floors adopt must find in the handover file. */
export interface RegistryHandover {
  readonly lentTo: number;
  readonly reclaimedAt: string;
  readonly workers: readonly { readonly worker: number; readonly lastMs: number }[];
  readonly maxLastMs: number;
}

/** Who adopted the code: the adopting region's etcd, as its region binding names it, and its prefix. */
export interface RegistryAdopter {
  readonly clusterId: string;
  readonly prefix: string;
}

/** One step of the code's history in the registry (what it was, when, at which registry revision). */
export interface RegistryTrailEntry {
  readonly state: RegistryState;
  readonly at: string;
  /** The mod revision of the record that step replaced ('0': none). */
  readonly after: string;
}

/** `{prefix}/spare-registry/{code}`. */
export interface SpareRegistryRecord {
  readonly code: number;
  readonly state: RegistryState;
  /** The borrowing region (every state; `adopted`: the one it was lent to before). */
  readonly lentTo: number;
  /** `reclaimed` and `adopted`: the handover's summary. */
  readonly handover?: RegistryHandover;
  /** `adopted`: the etcd that adopted it. */
  readonly adoptedBy?: RegistryAdopter;
  /**
   * The loan's term (docs/design.md §7, "Loan terms"): the wall-clock millisecond until which its borrowers may hold
   * slots under it, moved on by their renewals while it is `lent` and kept from then on. Adopt waits past it (plus
   * the TTL ceiling), so a borrower's etcd and the registry restored together cannot bring the loan back alive.
   * Absent: a loan lent before terms existed (its first renewal gives it one).
   */
  readonly untilMs?: number;
  /**
   * A loan the registry wrote without remembering it before (a lend that created the record, or a reconcile that
   * recreated it): the wall-clock millisecond from which its borrowers may claim under it (docs/design.md §7, "Loan
   * terms"). Any loan of the code a rewound registry forgot has ended by then, renewed or not: {@link newLoanTimes}.
   * Kept through renewals. Absent: claims at once (a loan lent before this field).
   */
  readonly usableFromMs?: number;
  readonly at: string;
  readonly trail: readonly RegistryTrailEntry[];
}

/**
 * The times of a loan the registry writes without remembering it (docs/design.md §7, "Loan terms"): a registry
 * restored to before a lend has no record of it, so a lend (or reconcile) of the code then cannot tell a free code
 * from one a borrower the deployment file leaves out still holds. That borrower cannot renew a loan the registry no
 * longer has, so it gives its slots back by the end of its last term: at most `termMs` after the registry forgot.
 * Its TTL is at most a quarter term (a confirmation needs four TTLs of term), which bounds what its clock may hold
 * past that; so the new loan's first claim waits a term, a quarter term and the clock bound. Its term runs a whole
 * term past that, so the wait does not depend on a borrower renewing it meanwhile.
 */
export function newLoanTimes(
  nowMs: number,
  termMs: number,
  clockBoundMs: number,
): { usableFromMs: number; untilMs: number } {
  const usableFromMs = nowMs + termMs + Math.ceil(termMs / 4) + clockBoundMs;
  return { usableFromMs, untilMs: usableFromMs + termMs };
}

/** A registry record as read, with its mod revision (what the next step compares, and what a mirror records). */
export interface SpareRegistryEntry {
  readonly key: string;
  readonly record: SpareRegistryRecord;
  readonly modRevision: string;
  /** Which registry answered: its etcd's cluster ID and the prefix (what a mirror records it follows). */
  readonly registry: RegistryIdentity;
}

/** A registry's identity: the etcd cluster it lives in and its prefix there. */
export interface RegistryIdentity {
  readonly clusterId: string;
  readonly prefix: string;
}

export const registryKeys = {
  code: (prefix: string, code: number) => `${prefix}/spare-registry/${code}`,
  all: (prefix: string) => `${prefix}/spare-registry/`,
} as const;

/** The registry's connection, as the spare-code steps take it. */
export interface RegistryIo {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
  /** How to name it in messages (its URLs); default "the spare-code registry". */
  readonly name?: string;
}

/**
 * A registry call that failed without a refusal of ours (no answer in time, a connection refused, etcd denied it):
 * `cause` is etcd's error. Nothing was written to the region's etcd after it.
 */
export class SpareRegistryCallError extends Error {
  override readonly name = 'SpareRegistryCallError';
  constructor(
    message: string,
    override readonly cause: unknown,
  ) {
    super(message);
  }
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v);
}

/** Parses `{prefix}/spare-registry/{code}`; anything unexpected throws {@link CorruptRecordError} naming the field. */
export function parseRegistryRecord(key: string, raw: string, maxRegion = 7): SpareRegistryRecord {
  const o = parseJsonObject(key, raw);
  const code = o['code'];
  if (!isInt(code) || code < 0 || code > maxRegion || String(code) !== key.slice(key.lastIndexOf('/') + 1))
    throw new CorruptRecordError(key, 'field code is not the region code of the key', raw);
  const state = o['state'];
  if (typeof state !== 'string' || !STATES.includes(state as RegistryState))
    throw new CorruptRecordError(key, `field state is not one of ${STATES.join(', ')}`, raw);
  const lentTo = o['lentTo'];
  if (!isInt(lentTo) || lentTo < 0 || lentTo > maxRegion || lentTo === code)
    throw new CorruptRecordError(key, `field lentTo is not a region code 0-${maxRegion} other than ${code}`, raw);
  let handover: RegistryHandover | undefined;
  if (state === 'reclaimed' || state === 'adopted') {
    const h = o['handover'] as Record<string, unknown> | undefined;
    const workers = h?.['workers'];
    if (
      typeof h !== 'object' ||
      h === null ||
      !isInt(h['lentTo']) ||
      !isInt(h['maxLastMs']) ||
      !Array.isArray(workers) ||
      workers.some(
        (w) => !isInt((w as Record<string, unknown>)?.['worker']) || !isInt((w as Record<string, unknown>)?.['lastMs']),
      )
    )
      throw new CorruptRecordError(
        key,
        'field handover needs integers lentTo, maxLastMs and workers [{worker, lastMs}]',
        raw,
      );
    handover = {
      lentTo: h['lentTo'],
      reclaimedAt: typeof h['reclaimedAt'] === 'string' ? h['reclaimedAt'] : '',
      workers: (workers as { worker: number; lastMs: number }[]).map((w) => ({ worker: w.worker, lastMs: w.lastMs })),
      maxLastMs: h['maxLastMs'],
    };
  }
  let adoptedBy: RegistryAdopter | undefined;
  if (state === 'adopted') {
    const a = o['adoptedBy'] as Record<string, unknown> | undefined;
    if (typeof a !== 'object' || a === null || typeof a['clusterId'] !== 'string' || typeof a['prefix'] !== 'string')
      throw new CorruptRecordError(key, 'field adoptedBy needs strings clusterId and prefix', raw);
    adoptedBy = { clusterId: a['clusterId'], prefix: a['prefix'] };
  }
  const untilMs = o['untilMs'];
  if (untilMs !== undefined && (!isInt(untilMs) || untilMs < 0))
    throw new CorruptRecordError(key, 'field untilMs is not a millisecond timestamp', raw);
  const usableFromMs = o['usableFromMs'];
  if (usableFromMs !== undefined && (!isInt(usableFromMs) || usableFromMs < 0))
    throw new CorruptRecordError(key, 'field usableFromMs is not a millisecond timestamp', raw);
  const trail = Array.isArray(o['trail'])
    ? (o['trail'] as Record<string, unknown>[])
        .filter((t) => typeof t === 'object' && t !== null && STATES.includes(t['state'] as RegistryState))
        .map((t) => ({
          state: t['state'] as RegistryState,
          at: typeof t['at'] === 'string' ? t['at'] : '',
          after: typeof t['after'] === 'string' ? t['after'] : '',
        }))
    : [];
  return {
    code,
    state: state as RegistryState,
    lentTo,
    ...(handover === undefined ? {} : { handover }),
    ...(adoptedBy === undefined ? {} : { adoptedBy }),
    ...(untilMs === undefined ? {} : { untilMs }),
    ...(usableFromMs === undefined ? {} : { usableFromMs }),
    at: typeof o['at'] === 'string' ? o['at'] : '',
    trail,
  };
}

function where(io: RegistryIo): string {
  return io.name === undefined ? 'the spare-code registry' : `the spare-code registry (${io.name})`;
}

async function call<T>(io: RegistryIo, what: string, p: () => Promise<T>): Promise<T> {
  try {
    return await withTimeout(p(), io.timeoutMs, what);
  } catch (e) {
    throw new SpareRegistryCallError(`${where(io)}: ${(e as Error).message ?? String(e)}`, e);
  }
}

/** Reads the registry's record of `code`; `undefined`: free (never lent). */
export async function readRegistryCode(
  io: RegistryIo,
  code: number,
  maxRegion = 7,
): Promise<SpareRegistryEntry | undefined> {
  const key = registryKeys.code(io.prefix, code);
  const r = await call(io, `reading ${key}`, () => io.client.get(key).options(deadlineIn(io.timeoutMs)).exec());
  const read = firstKey(r.kvs);
  if (read === undefined) return undefined;
  return {
    key,
    record: parseRegistryRecord(key, read.value, maxRegion),
    modRevision: read.modRevision,
    registry: { clusterId: r.header.cluster_id, prefix: io.prefix },
  };
}

/** Every record in the registry, by code. */
export async function listRegistryCodes(io: RegistryIo, maxRegion = 7): Promise<SpareRegistryEntry[]> {
  const prefix = registryKeys.all(io.prefix);
  const r = await call(io, `listing ${prefix}`, () =>
    io.client.getAll().prefix(prefix).options(deadlineIn(io.timeoutMs)).exec(),
  );
  // The registry's own keys beside the codes (`deployment`, a region's `seen`: ./registry-identity.ts) are not codes.
  return r.kvs
    .filter((kv) => /^[0-9]+$/.test(kv.key.toString('utf8').slice(prefix.length)))
    .map((kv) => {
      const key = kv.key.toString('utf8');
      const read = firstKey([kv]);
      return {
        key,
        record: parseRegistryRecord(key, read?.value ?? '', maxRegion),
        modRevision: read?.modRevision ?? '0',
        registry: { clusterId: r.header.cluster_id, prefix: io.prefix },
      };
    })
    .sort((a, b) => a.record.code - b.record.code);
}

/**
 * Writes `next` for `code` in the registry if the record is still the one read (`expected`: its entry, or `undefined`
 * for "absent"), with a trail entry. Returns the new entry, or, when someone else changed it meanwhile, the record
 * there now (`won: false`) for the caller to judge again.
 */
export async function casRegistryCode(
  io: RegistryIo,
  expected: SpareRegistryEntry | undefined,
  next: Omit<SpareRegistryRecord, 'trail'>,
  maxRegion = 7,
): Promise<{ won: boolean; entry: SpareRegistryEntry | undefined }> {
  const key = registryKeys.code(io.prefix, next.code);
  const after = expected?.modRevision ?? '0';
  const record: SpareRegistryRecord = {
    ...next,
    trail: [...(expected?.record.trail ?? []), { state: next.state, at: next.at, after }].slice(-20),
  };
  const res = await call(io, `registry transaction on ${key}`, () =>
    (expected === undefined ? io.client.if(key, 'Create', '==', 0) : io.client.if(key, 'Mod', '==', after))
      .then(io.client.put(key).value(JSON.stringify(record)))
      .else(io.client.get(key))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
  );
  const registry = { clusterId: res.header.cluster_id, prefix: io.prefix };
  if (res.succeeded) return { won: true, entry: { key, record, modRevision: res.header.revision, registry } };
  const raw = rangeValue(res.responses[0]);
  if (raw === undefined) return { won: false, entry: undefined };
  const modRevision = res.responses[0]?.response_range?.kvs[0]?.mod_revision ?? '0';
  return { won: false, entry: { key, record: parseRegistryRecord(key, raw, maxRegion), modRevision, registry } };
}

/**
 * A borrower's renewal of its loan's term (docs/design.md §7, "Loan terms"): `untilMs` moves to `untilMs` given, if the
 * record is still the one read (compared on its mod revision) and still `lent`. No trail entry: a renewal is not a
 * step of the code's history. Returns the new entry, or `undefined` when the record changed meanwhile (another
 * borrower renewed it, or a reclaim began): the caller reads it again at its next check.
 */
export async function renewLoanTerm(
  io: RegistryIo,
  read: SpareRegistryEntry,
  untilMs: number,
): Promise<SpareRegistryEntry | undefined> {
  if (read.record.state !== 'lent') return undefined;
  const record: SpareRegistryRecord = { ...read.record, untilMs };
  const res = await call(io, `renewing ${read.key}`, () =>
    io.client
      .if(read.key, 'Mod', '==', read.modRevision)
      .then(io.client.put(read.key).value(JSON.stringify(record)))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
  );
  if (!res.succeeded) return undefined;
  return { ...read, record, modRevision: res.header.revision };
}

/** One line saying who holds `code` according to the registry. */
export function describeRegistry(r: SpareRegistryRecord): string {
  switch (r.state) {
    case 'lent':
      return `lent to region ${r.lentTo}`;
    case 'reclaiming':
      return `being reclaimed from region ${r.lentTo}`;
    case 'reclaimed':
      return `reclaimed from region ${r.lentTo}, not yet adopted`;
    case 'adopted':
      return `adopted by the etcd of cluster ${r.adoptedBy?.clusterId ?? '?'} (prefix ${r.adoptedBy?.prefix ?? '?'}), lent to region ${r.lentTo} before`;
  }
}
