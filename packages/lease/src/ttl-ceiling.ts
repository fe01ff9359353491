import type { Etcd3 } from 'etcd3';
import { createOnce } from './create-once.js';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import { CorruptRecordError, LeaseError } from './errors.js';
import { parseJsonObject, parseLastMsRecord } from './records.js';

/**
 * The deployment's lease TTL ceiling (docs/design.md §5, "The TTL ceiling"; §8, the threat "TTLs that differ"): the
 * longest lease TTL any holder of the deployment may use, pinned once in every etcd of it under `{prefix}/lease-ceiling`
 * (beside the layout and the region binding) by `idgen region init`. A node or embedded source with a longer TTL
 * refuses to start, and so does every holder on an etcd without the record; every hold that covers a holder no record shows (the start hold, the distrust floor, the marks of
 * `idgen region restored`) waits by the ceiling, not by its own TTL. Without it, a node on a 6 s TTL that starts after a
 * restore waits 6 s for a lost holder that ran on 30 s and mints until 30 s after its last keep-alive.
 */
export interface TtlCeilingRecord {
  /** The longest lease TTL any holder may use, in whole seconds. */
  readonly ttlCeilingSeconds: number;
  /** When it was pinned (ISO-8601). */
  readonly at: string;
}

/** The ceiling's key under a prefix. */
export const ttlCeilingKey = (prefix: string): string => `${prefix}/lease-ceiling`;

/**
 * The ceiling `idgen region init` pins when not told otherwise: the default lease TTL (docs/design.md §3), so a
 * deployment on the defaults pays nothing for it. A deployment whose holders use a longer TTL pins that instead.
 */
export const DEFAULT_TTL_CEILING_SECONDS = 6;
/** The range a ceiling may take: the lease's own TTL range (etcd's minimum, and `@idgen/embedded`'s maximum). */
export const TTL_CEILING_RANGE = { min: 2, max: 3600 } as const;

/** A TTL above the deployment's ceiling, or a ceiling that cannot be pinned: never retried (docs/design.md §5). */
export class TtlCeilingError extends LeaseError {
  constructor(message: string) {
    super('config', message, false);
    this.name = 'TtlCeilingError';
  }
}

/** Parses `{prefix}/lease-ceiling`; garbage throws {@link CorruptRecordError} naming the key and the field. */
export function parseTtlCeiling(key: string, raw: string): TtlCeilingRecord {
  const o = parseJsonObject(key, raw);
  const s = o['ttlCeilingSeconds'];
  if (typeof s !== 'number' || !Number.isSafeInteger(s) || s < TTL_CEILING_RANGE.min || s > TTL_CEILING_RANGE.max) {
    throw new CorruptRecordError(
      key,
      `field ttlCeilingSeconds is not a whole number of seconds from ${TTL_CEILING_RANGE.min} to ${TTL_CEILING_RANGE.max}`,
      raw,
    );
  }
  return { ttlCeilingSeconds: s, at: typeof o['at'] === 'string' ? o['at'] : '' };
}

interface Io {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
}

/** The pinned ceiling, or `undefined` when this etcd has none (a deployment not pinned yet: docs/runbook.md). */
export async function readTtlCeiling(io: Io): Promise<TtlCeilingRecord | undefined> {
  const key = ttlCeilingKey(io.prefix);
  const res = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key}`,
  );
  const kv = firstKey(res.kvs);
  return kv === undefined ? undefined : parseTtlCeiling(key, kv.value);
}

/**
 * A holder's check at every claim (docs/design.md §5): refuses a TTL above the pinned ceiling with one line, and returns
 * the TTL every hold for a holder no record shows must wait by (the ceiling). An etcd with no ceiling is refused too,
 * with one line naming the `idgen region init` that pins it: its holds could only guess how long a holder lost with a
 * restore may still mint (a holder's own TTL is the guess issue 31 case 3 broke; the longest TTL any holder may use,
 * {@link TTL_CEILING_RANGE}.max, would hold every start an hour). When in doubt, refuse.
 */
export async function holdTtlMs(io: Io, ttlMs: number, region: number): Promise<number> {
  const ceiling = await readTtlCeiling(io);
  if (ceiling === undefined) {
    throw new TtlCeilingError(
      `this etcd has no lease TTL ceiling (${ttlCeilingKey(io.prefix)}): pin it with idgen region init --region ${region} ` +
        '--lease-ttl-ceiling S (S at least the longest lease TTL of any holder; docs/runbook.md, "The lease TTL ceiling")',
    );
  }
  const ceilingMs = ceiling.ttlCeilingSeconds * 1000;
  if (ttlMs > ceilingMs) {
    throw new TtlCeilingError(
      `lease TTL ${ttlMs / 1000} s is above this deployment's TTL ceiling of ${ceiling.ttlCeilingSeconds} s ` +
        `(${ttlCeilingKey(io.prefix)}): use a TTL of at most ${ceiling.ttlCeilingSeconds} s, or pin a higher ceiling ` +
        '(docs/runbook.md, "The lease TTL ceiling")',
    );
  }
  return ceilingMs;
}

/**
 * Pins the ceiling (`idgen region init --lease-ttl-ceiling S`): created only if absent, after checking that no
 * `last-ms` record under the prefix was written with a longer TTL (a holder running now, or one a restore could
 * bring back, would outlive every hold). The same value again changes nothing; another value is refused: raising it
 * would leave holds already computed too short, lowering it would leave running holders above it.
 */
export async function pinTtlCeiling(
  io: Io & { now?: () => number },
  seconds: number,
): Promise<{ record: TtlCeilingRecord; changed: boolean }> {
  if (!Number.isSafeInteger(seconds) || seconds < TTL_CEILING_RANGE.min || seconds > TTL_CEILING_RANGE.max) {
    throw new TtlCeilingError(
      `the lease TTL ceiling must be a whole number of seconds from ${TTL_CEILING_RANGE.min} to ${TTL_CEILING_RANGE.max}, got ${String(seconds)}`,
    );
  }
  const key = ttlCeilingKey(io.prefix);
  const existing = await readTtlCeiling(io);
  if (existing !== undefined) return { record: checkSame(key, existing, seconds), changed: false };
  const longest = await longestRecordedTtl(io);
  if (longest !== undefined && longest.ttlMs > seconds * 1000) {
    throw new TtlCeilingError(
      `${longest.key} was written by a holder with a ${longest.ttlMs / 1000} s TTL, above the ceiling of ${seconds} s: ` +
        `pin at least ${Math.ceil(longest.ttlMs / 1000)} s (--lease-ttl-ceiling)`,
    );
  }
  const record: TtlCeilingRecord = {
    ttlCeilingSeconds: seconds,
    at: new Date((io.now ?? Date.now)()).toISOString(),
  };
  const res = await createOnce(io, key, JSON.stringify(record), `pinning ${key}`);
  if (res.kind === 'created') return { record, changed: true };
  return { record: checkSame(key, parseTtlCeiling(key, res.raw), seconds), changed: false };
}

function checkSame(key: string, existing: TtlCeilingRecord, seconds: number): TtlCeilingRecord {
  if (existing.ttlCeilingSeconds !== seconds) {
    throw new TtlCeilingError(
      `this deployment's lease TTL ceiling is pinned at ${existing.ttlCeilingSeconds} s (${key}, since ${existing.at}), ` +
        `not ${seconds} s: a ceiling is pinned once (docs/runbook.md, "The lease TTL ceiling")`,
    );
  }
  return existing;
}

/** The `last-ms` record under the prefix written with the longest TTL, if any carries one. */
async function longestRecordedTtl(io: Io): Promise<{ key: string; ttlMs: number } | undefined> {
  const from = `${io.prefix}/regions/`;
  const res = await withTimeout(
    io.client.getAll().prefix(from).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${from}`,
  );
  let longest: { key: string; ttlMs: number } | undefined;
  for (const kv of res.kvs) {
    const key = kv.key.toString('utf8');
    if (!/\/last-ms\/\d+$/.test(key)) continue;
    let ttlMs: number | undefined;
    try {
      ttlMs = parseLastMsRecord(key, kv.value.toString('utf8')).ttlMs;
    } catch {
      continue; // garbage is refused by any claimer anyway
    }
    if (ttlMs !== undefined && ttlMs > (longest?.ttlMs ?? 0)) longest = { key, ttlMs };
  }
  return longest;
}
