/**
 * One chaos caller: a process that uses `@idgen/client` like an application would, mints continuously at
 * a bounded rate, and records everything the verifier needs (see `records.ts`). It finds the nodes through
 * a file the chaos run keeps current (its own discovery: the client takes any `list()`/`watch()` source,
 * docs/design.md §7), so every node process has its own URL and each block can be traced to the process that
 * minted it. Runs until SIGTERM/SIGINT, then flushes its files and prints one JSON summary line.
 *
 * `node caller.js --index N --dir DIR --nodes-file FILE --region R --rate IDS_PER_S --batch B [--fallback CODE:FILE …]`
 *
 * Each `--fallback CODE:FILE` (a run over regions, src/regions.ts) is a fallback region and the node list file of its
 * nodes, tried in the order given once every home node has failed and the buffer is empty (docs/design.md §7).
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import {
  createConnectTransport,
  createIdClient,
  isIdClientError,
  type DiscoveredNode,
  type IdClient,
  type IdTransport,
  type NodeDiscovery,
  type NodeTarget,
} from '@idgen/client';
import {
  LATENCY_FIELDS,
  STATS_SAMPLE_MS,
  callerFiles,
  encodeIds,
  encodeTimes,
  type BlockLine,
  type FailureLine,
  type StatsLine,
} from './records.js';

/** A node list kept in a JSON file (`[{"address": "127.0.0.1:1234"}]`), re-read every `pollMs`. */
function fileDiscovery(path: string, pollMs: number): NodeDiscovery & { close(): void } {
  let current: readonly DiscoveredNode[] = [];
  let text = '';
  const watchers = new Set<(nodes: readonly DiscoveredNode[]) => void>();
  const read = async (): Promise<void> => {
    let next: string;
    try {
      next = await readFile(path, 'utf8');
    } catch {
      return; // not written yet, or being replaced: keep the last list
    }
    if (next === text) return;
    try {
      current = JSON.parse(next) as DiscoveredNode[];
      text = next;
    } catch {
      return;
    }
    for (const w of watchers) w(current);
  };
  const timer = setInterval(() => void read(), pollMs);
  return {
    async list() {
      await read();
      return current;
    },
    watch(fn) {
      watchers.add(fn);
      return () => watchers.delete(fn);
    },
    close: () => clearInterval(timer),
  };
}

function parse(argv: string[]): {
  index: number;
  dir: string;
  nodesFile: string;
  region: number;
  rate: number;
  batch: number;
  fallbacks: { region: number; nodesFile: string }[];
} {
  const { values } = parseArgs({
    args: argv,
    options: {
      index: { type: 'string' },
      dir: { type: 'string' },
      'nodes-file': { type: 'string' },
      region: { type: 'string', default: '1' },
      rate: { type: 'string', default: '1000' },
      batch: { type: 'string', default: '10' },
      fallback: { type: 'string', multiple: true },
    },
    strict: true,
  });
  const int = (name: string, v: string | undefined, min: number): number => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < min)
      throw new Error(`caller: --${name} must be an integer ≥ ${min}, got ${String(v)}`);
    return n;
  };
  if (values.dir === undefined || values['nodes-file'] === undefined)
    throw new Error('caller: --dir and --nodes-file are required');
  return {
    index: int('index', values.index, 0),
    dir: values.dir,
    nodesFile: values['nodes-file'],
    region: int('region', values.region, 0),
    rate: int('rate', values.rate, 1),
    batch: int('batch', values.batch, 1),
    fallbacks: (values.fallback ?? []).map((f) => {
      const at = f.indexOf(':');
      if (at <= 0) throw new Error(`caller: --fallback must be CODE:FILE, got ${f}`);
      return { region: int('fallback', f.slice(0, at), 0), nodesFile: f.slice(at + 1) };
    }),
  };
}

/**
 * Each call's (start wall ms, duration ms, ok, late ms) into one preallocated Float64Array, written out when full and on
 * `flush()` (every second and at the stop): the hot loop allocates nothing per call (issue 25: keep it cheap).
 */
function latencyRecorder(
  stream: WriteStream,
  records = 1024,
): { add(startMs: number, ms: number, ok: boolean, lateMs: number): void; flush(): void } {
  const buf = new Float64Array(records * LATENCY_FIELDS);
  let at = 0;
  const flush = (): void => {
    if (at === 0) return;
    // A copy: the array is reused at once, and a stream keeps the chunk until it is written.
    write(stream, Buffer.from(buf.buffer.slice(0, at * 8)));
    at = 0;
  };
  return {
    add(startMs, ms, ok, lateMs) {
      buf[at++] = startMs;
      buf[at++] = ms;
      buf[at++] = ok ? 1 : 0;
      buf[at++] = lateMs;
      if (at === buf.length) flush();
    },
    flush,
  };
}

/**
 * The client's counters as a `stats.jsonl` line whenever they changed since the last one (sampled every
 * {@link STATS_SAMPLE_MS} ms and at the stop): the run charges their growth to the fault windows.
 */
function statsSampler(client: IdClient, stream: WriteStream): () => void {
  let last = '';
  return () => {
    const s = client.stats();
    const counters = [
      s.discarded,
      s.hedgesSent,
      s.hedgesWon,
      s.hedgeBlocksDiscarded,
      s.refusedForeignRegion,
      s.refusedReplayed,
    ].join(',');
    if (counters === last) return;
    last = counters;
    const line: StatsLine = {
      atMs: Date.now(),
      discarded: s.discarded,
      hedgesSent: s.hedgesSent,
      hedgesWon: s.hedgesWon,
      hedgeBlocksDiscarded: s.hedgeBlocksDiscarded,
      refusedForeignRegion: s.refusedForeignRegion,
      refusedReplayed: s.refusedReplayed,
    };
    write(stream, `${JSON.stringify(line)}\n`);
  };
}

function write(stream: WriteStream, chunk: Buffer | string): void {
  // Backpressure is ignored on purpose: the volume is bounded by the rate (a few MB a minute).
  stream.write(chunk);
}

function end(stream: WriteStream): Promise<void> {
  return new Promise((resolve) => stream.end(resolve));
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  const files = callerFiles(o.dir, o.index);
  const idsOut = createWriteStream(files.ids, { flags: 'a' });
  const blocksOut = createWriteStream(files.blocks, { flags: 'a' });
  const callsOut = createWriteStream(files.calls, { flags: 'a' });
  const failuresOut = createWriteStream(files.failures, { flags: 'a' });
  const latencyOut = createWriteStream(files.latency, { flags: 'a' });
  const statsOut = createWriteStream(files.stats, { flags: 'a' });

  const discovery = fileDiscovery(o.nodesFile, 200);
  // Record every block at the transport, with the node that answered and the arrival time: this is every
  // ID the caller received, including any its buffer later discards unused.
  const transport = (target: NodeTarget): IdTransport => {
    const inner = createConnectTransport(target);
    return {
      async nextIds(count, options) {
        const blocks = await inner.nextIds(count, options);
        const receivedMs = Date.now();
        let lines = '';
        for (const b of blocks) {
          const line: BlockLine = { node: target.url, first: b.first.toString(), count: b.count, receivedMs };
          lines += `${JSON.stringify(line)}\n`;
        }
        write(blocksOut, lines);
        return blocks;
      },
      close: () => inner.close(),
    };
  };
  // The client's defaults, hedged refills included (on by default): the cost a caller sees out of the box.
  const fallbacks = o.fallbacks.map((f) => ({ region: f.region, discovery: fileDiscovery(f.nodesFile, 200) }));
  const client = createIdClient({
    region: o.region,
    discovery,
    transport,
    ...(fallbacks.length > 0 ? { fallbackRegions: fallbacks } : {}),
  });
  const latency = latencyRecorder(latencyOut);
  const sampleStats = statsSampler(client, statsOut);
  sampleStats();
  const statsTimer = setInterval(sampleStats, STATS_SAMPLE_MS);
  const flushTimer = setInterval(() => latency.flush(), 1000);

  let stopping = false;
  let ok = 0;
  let ids = 0;
  let failed = 0;
  const intervalMs = (o.batch * 1000) / o.rate;
  const loop = (async () => {
    let next = performance.now();
    while (!stopping) {
      const startMs = Date.now();
      const t0 = performance.now();
      // How late this caller's own timer woke (CPU starvation, GC): part of a gap between IDs, not of idgen's cost.
      const lateMs = Math.max(0, t0 - next);
      try {
        const got = await client.nextIds(o.batch);
        latency.add(startMs, performance.now() - t0, true, lateMs);
        write(idsOut, encodeIds(got));
        write(callsOut, encodeTimes([Date.now()]));
        ok++;
        ids += got.length;
      } catch (e) {
        if (stopping) break;
        latency.add(startMs, performance.now() - t0, false, lateMs);
        failed++;
        const line: FailureLine = {
          atMs: Date.now(),
          code: isIdClientError(e) ? e.code : 'error',
          message: e instanceof Error ? e.message.slice(0, 300) : String(e),
        };
        write(failuresOut, `${JSON.stringify(line)}\n`);
      }
      // A bounded rate (issue 7: bounded in load): sleep to the next tick, never catching up in a burst.
      next = Math.max(next + intervalMs, performance.now());
      await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
    }
  })();

  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await client.close();
    await loop;
    discovery.close();
    for (const f of fallbacks) f.discovery.close();
    clearInterval(statsTimer);
    clearInterval(flushTimer);
    sampleStats();
    latency.flush();
    await Promise.all([end(idsOut), end(blocksOut), end(callsOut), end(failuresOut), end(latencyOut), end(statsOut)]);
    process.stdout.write(
      `${JSON.stringify({ msg: 'caller stopped', index: o.index, signal, calls: ok, ids, failed, stats: client.stats().refills })}\n`,
    );
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.stdout.write(
    `${JSON.stringify({ msg: 'caller started', index: o.index, pid: process.pid, rate: o.rate, batch: o.batch })}\n`,
  );
}

main().catch((e: unknown) => {
  process.stderr.write(`caller failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
