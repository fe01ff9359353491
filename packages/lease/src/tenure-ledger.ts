import type { Etcd3 } from 'etcd3';
import { deadlineIn, rangeKey, withTimeout } from './etcd-client.js';
import type { KeyRead } from './etcd-client.js';
import type { EtcdHistory } from './etcd-history.js';
import { CorruptRecordError } from './errors.js';
import { leaseKeys, parseJsonObject } from './records.js';
import type { LastMsRecord } from './records.js';

/**
 * The tenure ledger (docs/design.md §5): every holder's tenure of a worker slot, on record in etcd as it
 * starts and ends, in one bounded record per slot, `{prefix}/regions/{code}/tenures/{worker}`:
 * `{"tenures": [...the last TENURE_KEEP], "compacted": {"count", "maxLastMs"}}`. Older tenures are folded into
 * `compacted` (how many, and the highest millisecond any of them may have minted), so the record never grows without
 * limit and still answers the audit: a tenure's `firstMs` must lie above every earlier tenure's `lastMs`, and above
 * `compacted.maxLastMs`.
 *
 * The record is an audit trail, not a safety record: a holder's floor and ceiling come from `last-ms` alone.
 */

/** How a tenure ended; `open` while its holder may still mint. */
export type TenureEnd = 'open' | 'released' | 'expired' | 'fenced' | 'reclaimed';

const ENDS: readonly TenureEnd[] = ['open', 'released', 'expired', 'fenced', 'reclaimed'];

/** One holder's tenure of a slot. */
export interface Tenure {
  /** The region code of the slot (the code the IDs carry: a borrowed spare code for a borrower). */
  readonly code: number;
  readonly worker: number;
  readonly kind: 'service' | 'embedded';
  readonly nodeId: string;
  /** The holder's etcd lease (decimal). */
  readonly leaseId: string;
  /** The first millisecond it may mint in: its floor + 1. */
  readonly firstMs: number;
  /**
   * The last millisecond it may have minted in; `null` while `open` (its extent is then its `last-ms` record's
   * millisecond + TTL: the record is not written on every keep-alive).
   */
  readonly lastMs: number | null;
  readonly end: TenureEnd;
  /** When the tenure was recorded (ISO-8601, the writer's clock). */
  readonly startedAt: string;
  /** When it was closed (ISO-8601, the closer's clock). */
  readonly endedAt?: string;
}

/** The per-slot record. */
export interface TenureRecord {
  readonly tenures: readonly Tenure[];
  /** Tenures folded out of `tenures`: how many, and the highest `lastMs` among them (−1: none). */
  readonly compacted: { readonly count: number; readonly maxLastMs: number };
}

/** How many tenures a record keeps before folding the oldest into `compacted`. */
export const TENURE_KEEP = 16;

/** The tenure record's key. */
export const tenureKey = (prefix: string, code: number, worker: number): string =>
  leaseKeys.tenures(prefix, code, worker);

/** The tenure records' directory of one code. */
export const tenureDir = (prefix: string, code: number): string => `${prefix}/regions/${code}/tenures/`;

/** A record with no tenure. */
export const EMPTY_TENURE_RECORD: TenureRecord = { tenures: [], compacted: { count: 0, maxLastMs: -1 } };

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);

/** Parses a tenure record; garbage throws {@link CorruptRecordError} naming the key and the field. */
export function parseTenureRecord(key: string, raw: string): TenureRecord {
  const o = parseJsonObject(key, raw);
  const list = o['tenures'];
  if (!Array.isArray(list)) throw new CorruptRecordError(key, 'field tenures is not an array', raw);
  const c = o['compacted'];
  if (typeof c !== 'object' || c === null || Array.isArray(c))
    throw new CorruptRecordError(key, 'field compacted is not an object', raw);
  const count = (c as Record<string, unknown>)['count'];
  const maxLastMs = (c as Record<string, unknown>)['maxLastMs'];
  if (!isInt(count) || count < 0)
    throw new CorruptRecordError(key, 'field compacted.count is not a non-negative integer', raw);
  if (!isInt(maxLastMs) || maxLastMs < -1)
    throw new CorruptRecordError(key, 'field compacted.maxLastMs is not an integer ≥ −1', raw);
  const tenures = list.map((t: unknown, i): Tenure => {
    const at = `tenures[${i}]`;
    if (typeof t !== 'object' || t === null || Array.isArray(t))
      throw new CorruptRecordError(key, `field ${at} is not an object`, raw);
    const f = t as Record<string, unknown>;
    const int = (name: string, min: number): number => {
      const v = f[name];
      if (!isInt(v) || v < min)
        throw new CorruptRecordError(key, `field ${at}.${name} is not an integer ≥ ${min}`, raw);
      return v;
    };
    const str = (name: string): string => {
      const v = f[name];
      if (typeof v !== 'string') throw new CorruptRecordError(key, `field ${at}.${name} is not a string`, raw);
      return v;
    };
    const end = f['end'];
    if (typeof end !== 'string' || !(ENDS as readonly string[]).includes(end))
      throw new CorruptRecordError(key, `field ${at}.end is not one of ${ENDS.join(', ')}`, raw);
    const kind = f['kind'];
    if (kind !== 'service' && kind !== 'embedded')
      throw new CorruptRecordError(key, `field ${at}.kind is not "service" or "embedded"`, raw);
    const lastMs = f['lastMs'];
    if (end === 'open' && lastMs !== null)
      throw new CorruptRecordError(key, `field ${at}.lastMs is not null on an open tenure`, raw);
    if (end !== 'open' && (!isInt(lastMs) || lastMs < -1))
      throw new CorruptRecordError(key, `field ${at}.lastMs is not an integer on a closed tenure`, raw);
    if (end === 'open' && i !== list.length - 1)
      throw new CorruptRecordError(key, `field ${at}.end is open but it is not the last tenure`, raw);
    const endedAt = f['endedAt'];
    if (endedAt !== undefined && typeof endedAt !== 'string')
      throw new CorruptRecordError(key, `field ${at}.endedAt is not a string`, raw);
    return {
      code: int('code', 0),
      worker: int('worker', 0),
      kind,
      nodeId: str('nodeId'),
      leaseId: str('leaseId'),
      firstMs: int('firstMs', 0),
      lastMs: lastMs as number | null,
      end: end as TenureEnd,
      startedAt: str('startedAt'),
      ...(endedAt === undefined ? {} : { endedAt }),
    };
  });
  return { tenures, compacted: { count, maxLastMs } };
}

/**
 * The highest millisecond the writer of `record` may have minted in, as far as `last-ms` tells (`readerTtlMs`: the
 * reader's TTL, used when larger than the record's, as {@link computeFloor} does):
 * - released: its millisecond (written after minting stopped, at or above the last minted one);
 * - otherwise its millisecond + TTL. A holder never mints above its wall ceiling `L + TTL − margin` (docs/design.md
 *   §5), `L` being the last `last-ms` etcd acknowledged for it; `last-ms` never goes down and no write lands once the
 *   worker key is gone (each compares the key's lease), so `L` ≤ this record's `ms` when a successor reads it, and
 *   everything the writer minted is ≤ `ms + TTL − margin` < `ms + TTL`, whatever its clocks did.
 */
export function lastMsUpperBound(record: LastMsRecord, readerTtlMs: number): number {
  return record.released ? record.ms : record.ms + Math.max(readerTtlMs, record.ttlMs ?? 0);
}

/** Folds the oldest tenures beyond `keep` into `compacted` (only closed ones are ever folded: the open one is last). */
export function compactTenures(record: TenureRecord, keep = TENURE_KEEP): TenureRecord {
  if (record.tenures.length <= keep) return record;
  const folded = record.tenures.slice(0, record.tenures.length - keep);
  let { count, maxLastMs } = record.compacted;
  for (const t of folded) {
    count++;
    maxLastMs = Math.max(maxLastMs, t.lastMs ?? t.firstMs - 1);
  }
  return { tenures: record.tenures.slice(-keep), compacted: { count, maxLastMs } };
}

/**
 * A new holder's record at its claim: a last tenure left `open` (its holder crashed, was fenced or partitioned, and
 * never closed it) is closed first, then `mine` is appended, open. `last` is the slot's `last-ms` as the claim read it:
 * the closed tenure's `lastMs` is {@link lastMsUpperBound} of it (the record may be the crashed holder's, or a later
 * writer's, whose floor was above the crashed one's: an upper bound either way), and it ends `released` only when that
 * record is its own released one, else `expired`. Idempotent: a record that already ends with `mine`'s lease is
 * returned unchanged (`undefined`: nothing to write).
 */
export function openTenure(
  record: TenureRecord,
  mine: Tenure,
  last: LastMsRecord | undefined,
  readerTtlMs: number,
  nowIso: string,
  keep = TENURE_KEEP,
): TenureRecord | undefined {
  const previous = record.tenures[record.tenures.length - 1];
  if (previous?.leaseId === mine.leaseId) return undefined;
  const tenures = [...record.tenures];
  if (previous !== undefined && previous.end === 'open') {
    const boundMs = last === undefined ? previous.firstMs - 1 : lastMsUpperBound(last, readerTtlMs);
    const own = last !== undefined && last.released && last.leaseId === previous.leaseId;
    tenures[tenures.length - 1] = {
      ...previous,
      lastMs: Math.max(boundMs, previous.firstMs - 1),
      end: own ? 'released' : 'expired',
      endedAt: nowIso,
    };
  }
  tenures.push({ ...mine, lastMs: null, end: 'open' });
  return compactTenures({ tenures, compacted: record.compacted }, keep);
}

/**
 * A holder's record at the end of its tenure: its open tenure closed as `end` with `lastMs`. Idempotent: already
 * closed, nothing to write (`undefined`). A tenure missing from the record (its claim-time write was lost, or the
 * record was replaced) is appended, closed, after closing any open one before it at `mine.firstMs − 1`.
 */
export function closeTenure(
  record: TenureRecord,
  mine: Tenure,
  end: Exclude<TenureEnd, 'open'>,
  lastMs: number,
  nowIso: string,
  keep = TENURE_KEEP,
): TenureRecord | undefined {
  const i = record.tenures.findIndex((t) => t.leaseId === mine.leaseId);
  const closed: Tenure = { ...mine, lastMs: Math.max(lastMs, mine.firstMs - 1), end, endedAt: nowIso };
  if (i >= 0) {
    const found = record.tenures[i] as Tenure;
    if (found.end !== 'open') return undefined;
    const tenures = [...record.tenures];
    tenures[i] = { ...found, lastMs: closed.lastMs, end, endedAt: nowIso };
    return { tenures, compacted: record.compacted };
  }
  const tenures = [...record.tenures];
  const last = tenures[tenures.length - 1];
  if (last !== undefined && last.end === 'open')
    tenures[tenures.length - 1] = { ...last, lastMs: mine.firstMs - 1, end: 'expired', endedAt: nowIso };
  tenures.push(closed);
  return compactTenures({ tenures, compacted: record.compacted }, keep);
}

/** What one tenure-record update did. */
export type TenureWriteOutcome =
  /** Written (`revision`: the record's new mod revision), or nothing needed writing. */
  | { readonly kind: 'written'; readonly revision?: string }
  | { readonly kind: 'unchanged' }
  /** The worker key is not held by this lease: nothing was written (the slot is not ours). */
  | { readonly kind: 'not-held' }
  /** The record there does not parse: left as it is, for an operator (the audit reports it). */
  | { readonly kind: 'unreadable'; readonly problem: string }
  /** The record kept changing under a key this lease holds: `foreign` describes the writes found. */
  | { readonly kind: 'contended'; readonly foreign: string }
  /** The {@link JoinedWrite}'s key was not at its expected revision (`found`: what is there). Nothing was written. */
  | { readonly kind: 'joined-moved'; readonly found: KeyRead | undefined }
  /** The {@link JoinedWrite}'s guard changed (a borrowed code being reclaimed, §7). Nothing was written. */
  | { readonly kind: 'joined-withdrawn' };

/**
 * A write made in the same transaction as the tenure record's, compared as its own writes are: the holder's first
 * `last-ms` at its claim (docs/design.md §5), so that the two land together or not at all. Only `written` means it
 * landed; with any other outcome nothing was written, and the caller writes it on its own if it still should.
 */
export interface JoinedWrite {
  readonly key: string;
  /** Its mod revision as the holder last read or wrote it ("0": absent), compared. */
  readonly expectedRevision: string;
  readonly value: string;
  /** A key compared at its mod revision as well (a borrowed code's spare record, docs/design.md §7). */
  readonly guard?: { readonly key: string; readonly modRevision: string };
}

/**
 * Updates a slot's tenure record with `update` (a pure function of the record read; `undefined`: nothing to write).
 * Every write is one transaction that compares the worker key's lease with `leaseId` *and* the record's mod revision
 * with the one read, never a blind put: a holder that lost the slot cannot write, and a write given up on cannot land
 * over a newer one. A failed compare with the key still ours means the record changed under us: our own write that
 * timed out and landed late, or someone else's hand. The record is re-read and `update` applied again (it is
 * idempotent, so a late write of ours is found and nothing is written twice), at most `attempts` times; a change that
 * is not ours is reported to the caller (`onForeign`), who logs it: the record is not a safety record, and no holder is
 * fenced for it.
 *
 * `o.joined` ({@link JoinedWrite}) is put in the same transaction, its key and guard compared too; it lands only with
 * a record that `update` changed (`unchanged`, `unreadable` and `contended` write nothing, it included).
 */
export async function updateTenureRecord(
  client: Etcd3,
  leaseId: string,
  keys: { readonly worker: string; readonly tenures: string },
  update: (record: TenureRecord) => TenureRecord | undefined,
  timeoutMs: number,
  o: {
    history?: EtcdHistory;
    attempts?: number;
    /** The mod revision this holder's last write left: a record found at another one was changed by someone else. */
    lastWritten?: string;
    onForeign?: (found: KeyRead | undefined) => void;
    joined?: JoinedWrite;
  } = {},
): Promise<TenureWriteOutcome> {
  const started = Date.now();
  const left = (): number => Math.max(1, timeoutMs - (Date.now() - started));
  const attempts = o.attempts ?? 3;
  // The first read is a transaction too, so it says whether the key is ours before anything else.
  let read = await readBoth(client, keys, left());
  o.history?.observe(read.header);
  if (o.lastWritten !== undefined && read.worker?.lease === leaseId && read.tenures?.modRevision !== o.lastWritten)
    o.onForeign?.(read.tenures);
  let foreign = '';
  let moved = false;
  for (let attempt = 0; attempt < attempts; attempt++) {
    if (read.worker?.lease !== leaseId) return { kind: 'not-held' };
    let current: TenureRecord;
    try {
      current = read.tenures === undefined ? EMPTY_TENURE_RECORD : parseTenureRecord(keys.tenures, read.tenures.value);
    } catch (e) {
      return { kind: 'unreadable', problem: (e as Error).message };
    }
    const next = update(current);
    // After a failed compare, a record that needs nothing more holds our own write, landed late; with a joined write
    // it would have failed the joined key's compare first, so that write is not ours: `unchanged`, nothing joined.
    if (next === undefined) return { kind: moved && o.joined === undefined ? 'written' : 'unchanged' };
    if (moved) {
      o.onForeign?.(read.tenures);
      foreign = read.tenures === undefined ? 'deleted' : JSON.stringify(read.tenures.value.slice(0, 120));
    }
    const expected = read.tenures?.modRevision ?? '0';
    const j = o.joined;
    let cmp = client.if(keys.worker, 'Lease', '==', leaseId).and(keys.tenures, 'Mod', '==', expected);
    if (j !== undefined) cmp = cmp.and(j.key, 'Mod', '==', j.expectedRevision);
    if (j?.guard !== undefined) cmp = cmp.and(j.guard.key, 'Mod', '==', j.guard.modRevision);
    const res = await withTimeout(
      cmp
        .then(
          ...(j === undefined ? [] : [client.put(j.key).value(j.value)]),
          client.put(keys.tenures).value(JSON.stringify(next)),
        )
        .else(
          client.get(keys.worker),
          client.get(keys.tenures),
          ...(j === undefined ? [] : [client.get(j.key)]),
          ...(j?.guard === undefined ? [] : [client.get(j.guard.key)]),
        )
        .options(deadlineIn(left()))
        .commit(),
      left(),
      j === undefined ? `tenure write to ${keys.tenures}` : `${j.key} and tenure write to ${keys.tenures}`,
    );
    o.history?.observe(res.header);
    if (res.succeeded) return { kind: 'written', revision: String(res.header.revision) };
    read = { worker: rangeKey(res.responses[0]), tenures: rangeKey(res.responses[1]), header: res.header };
    if (j !== undefined && read.worker?.lease === leaseId) {
      const found = rangeKey(res.responses[2]);
      if ((found?.modRevision ?? '0') !== j.expectedRevision) return { kind: 'joined-moved', found };
      if (j.guard !== undefined && rangeKey(res.responses[3])?.modRevision !== j.guard.modRevision)
        return { kind: 'joined-withdrawn' };
    }
    moved = true;
  }
  return { kind: 'contended', foreign };
}

async function readBoth(
  client: Etcd3,
  keys: { readonly worker: string; readonly tenures: string },
  timeoutMs: number,
): Promise<{
  worker: KeyRead | undefined;
  tenures: KeyRead | undefined;
  header: { cluster_id: string; revision: string };
}> {
  const res = await withTimeout(
    client
      .if(keys.worker, 'Create', '>', 0)
      .then(client.get(keys.worker), client.get(keys.tenures))
      .options(deadlineIn(timeoutMs))
      .commit(),
    timeoutMs,
    `reading ${keys.tenures}`,
  );
  return { worker: rangeKey(res.responses[0]), tenures: rangeKey(res.responses[1]), header: res.header };
}
