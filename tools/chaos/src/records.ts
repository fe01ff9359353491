/**
 * What a caller process writes, and how the chaos run reads it back. One set of files per caller in the
 * run directory:
 *
 * - `caller-N.ids`: every ID its client handed out, 8 bytes big-endian each (issue 7);
 * - `caller-N.blocks.jsonl`: every `(first, count)` block a node returned, with the node's URL and the wall
 *   clock at arrival (rules 2 and 3);
 * - `caller-N.calls`: the wall-clock ms of each successful call, float64 little-endian (rule 4);
 * - `caller-N.failures.jsonl`: each failed call (rule 4);
 * - `caller-N.latency`: every call (failed ones too) as `(start wall ms, duration ms, ok 1/0, late ms)`, float64
 *   little-endian (issue 25: the caller-visible cost per fault window; `late`: how long after its tick the
 *   caller's own timer woke for this call, its own stall);
 * - `caller-N.stats.jsonl`: the client's counters (`stats()`: IDs discarded, hedges, refused blocks), a line
 *   whenever they changed, sampled every {@link STATS_SAMPLE_MS} ms (issue 25).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CallerTimeline, ReceivedBlock } from './verify.js';

/** The files of caller `n` in `dir`. */
export function callerFiles(
  dir: string,
  n: number,
): { ids: string; blocks: string; calls: string; failures: string; latency: string; stats: string } {
  return {
    ids: join(dir, `caller-${n}.ids`),
    blocks: join(dir, `caller-${n}.blocks.jsonl`),
    calls: join(dir, `caller-${n}.calls`),
    failures: join(dir, `caller-${n}.failures.jsonl`),
    latency: join(dir, `caller-${n}.latency`),
    stats: join(dir, `caller-${n}.stats.jsonl`),
  };
}

/** How often a caller samples its client's counters (a line is written only when they changed). */
export const STATS_SAMPLE_MS = 100;

/**
 * Float64 values per record of `caller-N.latency`: start wall ms, duration ms, 1 (ok) or 0 (failed), and how many ms
 * after its tick the caller's timer woke for the call.
 */
export const LATENCY_FIELDS = 4;

/** Blocks the chaos run itself fetched from a node while jumping its clock (caller −1 in the verifier). */
export function probeBlocksFile(dir: string): string {
  return join(dir, 'probe.blocks.jsonl');
}

/** The `node` of an embedded caller's blocks and holdings (`embedded-caller.ts`): one URL-like name per process. */
export function embeddedNodeName(name: string): string {
  return `embedded://${name}`;
}

/** One line of `caller-N.blocks.jsonl` (the ID as a decimal string: docs/design.md §1, text boundary). */
export interface BlockLine {
  readonly node: string;
  readonly first: string;
  readonly count: number;
  readonly receivedMs: number;
}

/** One line of `caller-N.failures.jsonl`. */
export interface FailureLine {
  readonly atMs: number;
  readonly code: string;
  readonly message: string;
}

/**
 * One line of `caller-N.stats.jsonl`: the client's counters at `atMs` (cumulative since the caller started;
 * `discarded` counts IDs, `hedgeBlocksDiscarded` and the refusals count blocks: packages/client's `stats()`).
 */
export interface StatsLine {
  readonly atMs: number;
  readonly discarded: number;
  readonly hedgesSent: number;
  readonly hedgesWon: number;
  readonly hedgeBlocksDiscarded: number;
  readonly refusedForeignRegion: number;
  readonly refusedReplayed: number;
}

/** The inverse of the caller's latency records: a torn last record (a caller killed mid-write) is dropped. */
export function decodeLatencies(buf: Buffer): Float64Array {
  const n = Math.floor(buf.length / (8 * LATENCY_FIELDS)) * LATENCY_FIELDS;
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = buf.readDoubleLE(i * 8);
  return out;
}

/** IDs as 8-byte big-endian records. */
export function encodeIds(ids: readonly bigint[]): Buffer {
  const buf = Buffer.allocUnsafe(ids.length * 8);
  for (let i = 0; i < ids.length; i++) buf.writeBigUInt64BE(ids[i] as bigint, i * 8);
  return buf;
}

/** The inverse of {@link encodeIds}; a torn last record (a caller killed mid-write) is dropped. */
export function decodeIds(buf: Buffer): BigUint64Array {
  const n = Math.floor(buf.length / 8);
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++) out[i] = buf.readBigUInt64BE(i * 8);
  return out;
}

/** Wall-clock ms as float64 little-endian records. */
export function encodeTimes(times: readonly number[]): Buffer {
  const buf = Buffer.allocUnsafe(times.length * 8);
  for (let i = 0; i < times.length; i++) buf.writeDoubleLE(times[i] as number, i * 8);
  return buf;
}

/** The inverse of {@link encodeTimes}. */
export function decodeTimes(buf: Buffer): Float64Array {
  const n = Math.floor(buf.length / 8);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = buf.readDoubleLE(i * 8);
  return out;
}

/** Parses JSON lines, skipping a torn last line. */
function parseLines<T>(text: string): T[] {
  const out: T[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    try {
      out.push(JSON.parse(line) as T);
    } catch {
      // a torn last line of a killed writer
    }
  }
  return out;
}

/** Everything one caller recorded. */
export interface CallerRecords {
  readonly caller: number;
  readonly handedOut: BigUint64Array;
  readonly blocks: ReceivedBlock[];
  readonly timeline: CallerTimeline;
  readonly failures: FailureLine[];
  /** Every call as {@link LATENCY_FIELDS} float64s (start wall ms, duration ms, ok, late ms). */
  readonly latencies: Float64Array;
  /** The client's counters over time, ascending. */
  readonly stats: StatsLine[];
}

async function readOrEmpty(path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return Buffer.alloc(0);
    throw e;
  }
}

/** Reads a blocks file (`caller-N.blocks.jsonl` or the probe's) as received blocks of `caller`. */
export async function readBlocksFile(path: string, caller: number): Promise<ReceivedBlock[]> {
  return parseLines<BlockLine>((await readOrEmpty(path)).toString('utf8')).map((b) => ({
    caller,
    node: b.node,
    first: BigInt(b.first),
    count: b.count,
    receivedMs: b.receivedMs,
  }));
}

/** Reads caller `n`'s files from `dir`. */
export async function readCallerRecords(dir: string, n: number): Promise<CallerRecords> {
  const files = callerFiles(dir, n);
  const [ids, blocks, calls, failures, latency, stats] = await Promise.all([
    readOrEmpty(files.ids),
    readBlocksFile(files.blocks, n),
    readOrEmpty(files.calls),
    readOrEmpty(files.failures),
    readOrEmpty(files.latency),
    readOrEmpty(files.stats),
  ]);
  const failureLines = parseLines<FailureLine>(failures.toString('utf8'));
  return {
    caller: n,
    handedOut: decodeIds(ids),
    blocks,
    timeline: { caller: n, successMs: decodeTimes(calls), failureMs: failureLines.map((f) => f.atMs) },
    failures: failureLines,
    latencies: decodeLatencies(latency),
    stats: parseLines<StatsLine>(stats.toString('utf8')).sort((a, b) => a.atMs - b.atMs),
  };
}
