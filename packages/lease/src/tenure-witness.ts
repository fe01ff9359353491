import { mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { CorruptRecordError } from './errors.js';
import { parseJsonObject } from './records.js';
import { parseTenureRecord, type Tenure } from './tenure-ledger.js';

/**
 * The tenure witness (docs/design.md §5 "A witness outside the etcd", issue 31 item 6): a holder's own journal of its
 * tenures, kept outside the etcd they are claimed in, so a tenure that a restored etcd no longer remembers (its
 * history rewound to a snapshot taken before the claim, or before the holder's last keep-alive) still has a witness
 * the audit can read. One small file per tenure, `{dir}/{code}-{worker}-{leaseId}.json`, replaced atomically (write,
 * fsync, rename) so a crash leaves the old version or the new one, never half of one:
 *
 * `{"tenure": {…as in the tenure record}, "ttlMs": 6000, "lastMs": 1733…, "etcd": "http://…", "updatedAt": "…"}`.
 *
 * `lastMs` is the highest `last-ms` etcd acknowledged for the holder (what its wall ceiling is taken from), so the
 * highest millisecond it may have minted in is `lastMs + ttlMs` while the tenure is open, and the tenure's own
 * `lastMs` once closed ({@link witnessExtent}).
 *
 * What it costs (measured: docs/design.md §5): one file write with fsync before a claim's first mint (awaited: a claim
 * whose witness cannot be written is given up, never minted on), one per acknowledged `last-ms` refresh (every
 * keep-alive interval; not awaited, the newest wins), one when the tenure closes; the files of a slot beyond the newest
 * {@link WITNESS_KEEP} are removed.
 */

/** One tenure as its holder's journal records it. */
export interface TenureWitnessRecord {
  readonly tenure: Tenure;
  /** The holder's lease TTL. */
  readonly ttlMs: number;
  /** The highest `last-ms` etcd acknowledged for the holder (−1: none yet). */
  readonly lastMs: number;
  /** The etcd endpoints the tenure was claimed in (for messages). */
  readonly etcd: string;
  readonly updatedAt: string;
}

/** A journal entry as the audit reads it: the record and the file it came from. */
export interface TenureWitnessEntry {
  readonly source: string;
  readonly record: TenureWitnessRecord;
}

/** Where a holder's tenures are witnessed (the lease calls it; {@link createFileTenureWitness} is the one shipped). */
export interface TenureWitness {
  /** The tenure opened: written before the first mint. A rejection refuses the claim. */
  opened(record: TenureWitnessRecord): Promise<void>;
  /** A `last-ms` acknowledged: recorded in the background (newest wins); never throws. */
  refreshed(record: TenureWitnessRecord): void;
  /** The tenure closed (released, fenced, reclaimed); best effort, never throws. */
  closed(record: TenureWitnessRecord): Promise<void>;
}

/** How many witnessed tenures of one slot a journal keeps (as many as the tenure record). */
export const WITNESS_KEEP = 16;

const fileOf = (t: Tenure): string => `${t.code}-${t.worker}-${t.leaseId}.json`;

/** Replaces `file` atomically with `text` (write and fsync a temporary file, rename it over). */
async function replaceFile(file: string, text: string): Promise<void> {
  const tmp = `${file}.tmp`;
  const h = await open(tmp, 'w', 0o600);
  try {
    await h.writeFile(text);
    await h.sync();
  } finally {
    await h.close();
  }
  await rename(tmp, file);
}

/**
 * A {@link TenureWitness} in the directory `dir` (created, mode 700). The directory must outlive the host's etcd and,
 * to witness a lost host, the host itself: a volume of its own, or one the deployment's log shipping copies off the
 * host (docs/runbook.md "The tenure journal"). Writes of one tenure are serialised; the last one queued wins.
 */
export function createFileTenureWitness(dir: string, onError: (e: unknown) => void = () => undefined): TenureWitness {
  let ready: Promise<void> | undefined;
  const mkdirOnce = (): Promise<void> => (ready ??= mkdir(dir, { recursive: true, mode: 0o700 }).then(() => undefined));
  let chain: Promise<void> = Promise.resolve();
  let pending: TenureWitnessRecord | undefined;
  const write = (r: TenureWitnessRecord): Promise<void> =>
    mkdirOnce().then(() => replaceFile(join(dir, fileOf(r.tenure)), `${JSON.stringify(r)}\n`));
  const enqueue = (r: TenureWitnessRecord): Promise<void> => {
    pending = r;
    chain = chain
      .catch(() => undefined)
      .then(async () => {
        const next = pending;
        pending = undefined;
        if (next !== undefined) await write(next);
      });
    return chain;
  };
  const prune = async (t: Tenure): Promise<void> => {
    const mine = `${t.code}-${t.worker}-`;
    const names = (await readdir(dir)).filter((n) => n.startsWith(mine) && n.endsWith('.json'));
    if (names.length <= WITNESS_KEEP) return;
    const byFirst: { name: string; firstMs: number }[] = [];
    for (const name of names) {
      try {
        byFirst.push({
          name,
          firstMs: parseTenureWitness(name, await readFile(join(dir, name), 'utf8')).tenure.firstMs,
        });
      } catch {
        // not ours to judge: the audit reports it
      }
    }
    byFirst.sort((a, b) => a.firstMs - b.firstMs);
    for (const old of byFirst.slice(0, Math.max(0, byFirst.length - WITNESS_KEEP)))
      await rm(join(dir, old.name), { force: true });
  };
  return {
    async opened(r) {
      await enqueue(r);
      await prune(r.tenure).catch(onError);
    },
    refreshed(r) {
      enqueue(r).catch(onError);
    },
    async closed(r) {
      await enqueue(r).catch(onError);
    },
  };
}

/** Parses one journal file; garbage throws {@link CorruptRecordError} naming the file and the field. */
export function parseTenureWitness(name: string, raw: string): TenureWitnessRecord {
  const o = parseJsonObject(name, raw);
  const t = o['tenure'];
  if (typeof t !== 'object' || t === null || Array.isArray(t))
    throw new CorruptRecordError(name, 'field tenure is not an object', raw);
  // The tenure reads as one of a tenure record's (its fields and their rules are the record's).
  const record = parseTenureRecord(name, JSON.stringify({ tenures: [t], compacted: { count: 0, maxLastMs: -1 } }));
  const tenure = record.tenures[0] as Tenure;
  const int = (f: string, min: number): number => {
    const v = o[f];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min)
      throw new CorruptRecordError(name, `field ${f} is not an integer ≥ ${min}`, raw);
    return v;
  };
  return {
    tenure,
    ttlMs: int('ttlMs', 0),
    lastMs: int('lastMs', -1),
    etcd: typeof o['etcd'] === 'string' ? o['etcd'] : '',
    updatedAt: typeof o['updatedAt'] === 'string' ? o['updatedAt'] : '',
  };
}

/**
 * The highest millisecond the witnessed holder may have minted in: a closed tenure's `lastMs`; an open one's last
 * acknowledged `last-ms` + its TTL (its wall ceiling is below that, docs/design.md §5), or nothing past its first
 * millisecond when no `last-ms` was acknowledged yet... except that the claim's first `last-ms` lands with the tenure,
 * so an open witness always carries one.
 */
export function witnessExtent(r: TenureWitnessRecord): number {
  if (r.tenure.lastMs !== null) return r.tenure.lastMs;
  return r.lastMs < 0 ? r.tenure.firstMs - 1 : r.lastMs + r.ttlMs;
}

/**
 * Reads every journal file under `dirs` (each a directory of a holder's journal, or one file); the ones that do not
 * parse are returned as problems (the audit reports each). For the CLI and the chaos tool: node:fs only.
 */
export async function readTenureWitnesses(
  dirs: readonly string[],
): Promise<{ entries: TenureWitnessEntry[]; problems: string[] }> {
  const entries: TenureWitnessEntry[] = [];
  const problems: string[] = [];
  for (const d of dirs) {
    let files: string[];
    try {
      files = d.endsWith('.json') ? [d] : (await readdir(d)).filter((n) => n.endsWith('.json')).map((n) => join(d, n));
    } catch (e) {
      problems.push(`journal ${d}: ${(e as Error).message}`);
      continue;
    }
    for (const f of files) {
      try {
        entries.push({ source: f, record: parseTenureWitness(f, await readFile(f, 'utf8')) });
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
  }
  return { entries, problems };
}
