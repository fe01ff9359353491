/**
 * `npm run bench:client`: what a caller pays for an ID through `@idgen/client` against one local node
 * (issue 6, "Benchmark"), side by side in the same run with one `NextIds(1)` RPC per ID over the same
 * kind of transport (Connect, binary, HTTP/2).
 *
 * Latency of one call (median, p99) when the buffer holds IDs, and sustained IDs/s for one caller
 * awaiting each ID in turn, and for 64 concurrent callers.
 */
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { createIdClient } from '@idgen/client';
import { IdGenerator } from '@idgen/proto';
import { type ProcessHandle, cleanupAll, freePort } from '@idgen/testing';
import { describeMachine, parseBenchArgs } from './environment.js';
import { buildServer, startIdgenServer } from './idgen-server.js';
import { nowNs } from './rounds.js';
import { countDuplicates, summarize } from './stats.js';
import { formatCount, formatNanoseconds, formatShare, formatTable } from './table.js';

const LATENCY_SAMPLES = 200_000;
const RPC_LATENCY_SAMPLES = 5_000;
const CONCURRENT_CALLERS = 64;

type NextId = () => Promise<bigint>;

/** Times `samples` sequential calls one by one; returns each call's nanoseconds (timer cost included). */
async function latencies(next: NextId, samples: number): Promise<number[]> {
  const out = new Array<number>(samples);
  for (let i = 0; i < samples; i++) {
    const start = nowNs();
    await next();
    out[i] = nowNs() - start;
  }
  return out;
}

/** The cost of the timer itself around nothing (an awaited resolved promise): the floor of the figures. */
async function timerFloor(samples: number): Promise<number[]> {
  const out = new Array<number>(samples);
  const resolved = Promise.resolve(0n);
  for (let i = 0; i < samples; i++) {
    const start = nowNs();
    await resolved;
    out[i] = nowNs() - start;
  }
  return out;
}

/**
 * `callers` loops each awaiting `next()` in turn for `seconds`; IDs/s over all of them. Each ID is
 * XOR-folded as it arrives (keeping millions would measure the garbage collector, not the client).
 */
async function sustained(next: NextId, callers: number, seconds: number): Promise<number> {
  let ids = 0;
  let fold = 0n;
  const start = nowNs();
  const end = start + seconds * 1e9;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      // Check the clock every 64 IDs: the timer would otherwise cost about what a buffered call costs.
      while (nowNs() < end) {
        for (let i = 0; i < 64; i++) fold ^= await next();
        ids += 64;
      }
    }),
  );
  sink ^= fold;
  return (ids * 1e9) / (nowNs() - start);
}

/** Collects `count` IDs from `callers` concurrent loops, for the duplicate count (a separate pass). */
async function collect(next: NextId, callers: number, count: number): Promise<BigUint64Array> {
  const ids = new BigUint64Array(count);
  let filled = 0;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (filled < count) {
        const id = await next();
        if (filled < count) ids[filled++] = id;
      }
    }),
  );
  return ids;
}

let sink = 0n;

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2), { rounds: 1, roundMs: 1, check: 1_000_000, seconds: 5 });
  buildServer();
  process.stdout.write(
    `bench:client: ${describeMachine()}\n` +
      `one local standalone node; the caller, the node and this script share the same 2 cores; ` +
      `${args.seconds} s per sustained case.\n\n`,
  );
  const servers: ProcessHandle[] = [];
  try {
    const port = await freePort();
    servers.push(await startIdgenServer(port));
    const baseUrl = `http://127.0.0.1:${port}`;

    const client = createIdClient({ region: 0, nodes: [baseUrl] });
    const rpc = createClient(IdGenerator, createConnectTransport({ baseUrl, httpVersion: '2', useBinaryFormat: true }));
    const oneRpc: NextId = async () => {
      const response = await rpc.nextIds({ count: 1 });
      const block = response.blocks[0];
      if (block === undefined || block.count !== 1) throw new Error('NextIds(1) did not return one ID');
      return block.first;
    };
    const buffered: NextId = () => client.nextId();
    const trySync: NextId = async () => client.tryNextId() ?? client.nextId();

    // Warm up both paths (JIT, HTTP/2 session, the client's demand-sized buffer).
    await sustained(buffered, 1, 1);
    await sustained(oneRpc, 1, 1);

    const floor = summarize(await timerFloor(LATENCY_SAMPLES));
    const bufferedLatency = summarize(await latencies(buffered, LATENCY_SAMPLES));
    const tryLatency = summarize(await latencies(trySync, LATENCY_SAMPLES));
    const rpcLatency = summarize(await latencies(oneRpc, RPC_LATENCY_SAMPLES));
    const bufferedOne = await sustained(buffered, 1, args.seconds);
    const rpcOne = await sustained(oneRpc, 1, args.seconds);
    const bufferedMany = await sustained(buffered, CONCURRENT_CALLERS, args.seconds);
    const rpcMany = await sustained(oneRpc, CONCURRENT_CALLERS, args.seconds);
    const bufferedIds = await collect(buffered, CONCURRENT_CALLERS, args.check);
    const rpcIds = await collect(oneRpc, CONCURRENT_CALLERS, Math.min(args.check, 20_000));
    const stats = client.stats();
    await client.close();

    const dupes = (ids: BigUint64Array): string => `${formatCount(countDuplicates(ids))} / ${formatCount(ids.length)}`;
    process.stdout.write('Latency of one call (sequential, one caller)\n');
    process.stdout.write(
      formatTable(
        [
          { header: 'call' },
          { header: 'median', align: 'right' },
          { header: 'p99', align: 'right' },
          { header: 'samples', align: 'right' },
        ],
        [
          [
            'await client.nextId() (buffered)',
            formatNanoseconds(bufferedLatency.median),
            formatNanoseconds(bufferedLatency.p99),
            formatCount(bufferedLatency.count),
          ],
          [
            'client.tryNextId() (sync, buffer only)',
            formatNanoseconds(tryLatency.median),
            formatNanoseconds(tryLatency.p99),
            formatCount(tryLatency.count),
          ],
          [
            'await NextIds(1) RPC',
            formatNanoseconds(rpcLatency.median),
            formatNanoseconds(rpcLatency.p99),
            formatCount(rpcLatency.count),
          ],
          [
            '(timer around an awaited resolved promise)',
            formatNanoseconds(floor.median),
            formatNanoseconds(floor.p99),
            formatCount(floor.count),
          ],
        ],
      ),
    );
    process.stdout.write('\nSustained IDs/s (each caller awaits each ID in turn)\n');
    process.stdout.write(
      formatTable(
        [
          { header: 'path' },
          { header: 'callers', align: 'right' },
          { header: 'IDs/s', align: 'right' },
          { header: '× one RPC per ID', align: 'right' },
        ],
        [
          ['@idgen/client nextId()', '1', formatCount(bufferedOne), `×${(bufferedOne / rpcOne).toFixed(1)}`],
          ['NextIds(1) per ID', '1', formatCount(rpcOne), '×1.0'],
          [
            '@idgen/client nextId()',
            String(CONCURRENT_CALLERS),
            formatCount(bufferedMany),
            `×${(bufferedMany / rpcMany).toFixed(1)}`,
          ],
          ['NextIds(1) per ID', String(CONCURRENT_CALLERS), formatCount(rpcMany), '×1.0'],
        ],
      ),
    );
    process.stdout.write(
      `duplicates (separate pass, ${CONCURRENT_CALLERS} callers): client ${dupes(bufferedIds)}, one RPC per ID ${dupes(rpcIds)}\n` +
        `client counters: ${JSON.stringify({ hits: stats.hits, misses: stats.misses, discarded: stats.discarded, retries: stats.retries })}\n` +
        `hit rate ${formatShare(stats.hits, stats.hits + stats.misses)}\n`,
    );
    const ratio = bufferedOne / rpcOne;
    process.stdout.write(
      `\nTarget: buffered nextId() well under 1 µs at the median: ${formatNanoseconds(bufferedLatency.median)}: ` +
        `${bufferedLatency.median < 1000 ? 'MET' : 'NOT MET'}\n` +
        `Target: ≥ 50× the IDs/s of one RPC per ID (one caller): ×${ratio.toFixed(1)}: ${ratio >= 50 ? 'MET' : 'NOT MET'}\n`,
    );
    process.stdout.write(`(sink checksum ${sink & 0xffffn}: keeps the JIT from dropping the work)\n`);
  } finally {
    for (const server of servers) await server.stop(5000);
    await cleanupAll();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench:client failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
