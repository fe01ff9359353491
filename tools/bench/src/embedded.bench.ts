/**
 * `npm run bench:embedded`: what a caller pays for an ID minted in its own process with `@idgen/embedded`
 * (issue 17), side by side in the same run with its baselines:
 * - `nextIdSync()` on a slot leased from a real etcd (keep-alives running between rounds) against one worker's
 *   ceiling of 4,096,000 IDs/s (target ≥ 95%), beside the bare core and the bare guard with no lease at all;
 *   duplicates counted over a full second's worth of IDs;
 * - `await nextId()` per call beside `@idgen/client`'s buffered `await nextId()` against a real local node.
 */
import { createGuardedMinter, systemClock } from '@idgen/clock-guard';
import { createIdClient } from '@idgen/client';
import { DEFAULT_LAYOUT, createMinter } from '@idgen/core';
import { createEmbeddedIdSource, isIdsUnavailableError, type EmbeddedIdSource } from '@idgen/embedded';
import { type ProcessHandle, bindRegion, cleanupAll, freePort, startEtcd } from '@idgen/testing';
import { BATCH, consume, coreSingleRound, sinkChecksum } from './core-loops.js';
import { ceilingIdsPerSecond, describeMachine, parseBenchArgs } from './environment.js';
import { type RefusalCount, embeddedSyncRound } from './embedded-loops.js';
import { buildServer, startIdgenServer } from './idgen-server.js';
import { type Round, type RoundsReport, nowNs } from './rounds.js';
import { countDuplicates, median, summarize } from './stats.js';
import { formatCount, formatNanoseconds, formatShare, formatTable } from './table.js';

const CEILING = ceilingIdsPerSecond(DEFAULT_LAYOUT);
const REGION = 2;
const LATENCY_SAMPLES = 200_000;

type NextId = () => Promise<bigint>;

/** Refusals (IdsUnavailableError) the embedded source gave during the run: each is an ID not handed out. */
const counts: RefusalCount = { refusals: 0 };

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/**
 * A pause between synchronous rounds: a keep-alive is two round trips to etcd (the keep-alive, then the last-ms
 * write), each finished only when the loop is free; one turn of the loop is too short for an answer to arrive.
 */
const pause = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5));

/**
 * `runRounds` for several cases at once, interleaved round by round (case A, B, C, then A, B, C again …), so a burst
 * of load from elsewhere on this shared machine lands on every case alike rather than on one. Each round is
 * synchronous (the hot loop a caller would write); a 5 ms pause between rounds lets the embedded source's lease
 * keep itself alive, as a caller's loop must.
 */
async function runInterleaved(
  rounds: readonly Round[],
  options: { rounds: number; roundMs: number; warmupRounds: number },
): Promise<RoundsReport[]> {
  for (let i = 0; i < options.warmupRounds; i++) {
    for (const round of rounds) {
      round(options.roundMs);
      await pause();
    }
  }
  const rates = rounds.map((): number[] => []);
  const nsPerCall = rounds.map((): number[] => []);
  for (let i = 0; i < options.rounds; i++) {
    for (const [k, round] of rounds.entries()) {
      const r = round(options.roundMs);
      rates[k]?.push((r.ids * 1e9) / r.elapsedNs);
      nsPerCall[k]?.push(r.elapsedNs / Math.max(1, r.calls));
      await pause();
    }
  }
  return rounds.map((_, k) => {
    const rs = rates[k] ?? [];
    return {
      idsPerSecond: rs,
      medianIdsPerSecond: median(rs),
      minIdsPerSecond: Math.min(...rs),
      maxIdsPerSecond: Math.max(...rs),
      medianNsPerCall: median(nsPerCall[k] ?? []),
    };
  });
}

function guardSingleRound(next: () => bigint): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let i = 0; i < BATCH; i++) fold ^= next();
      ids += BATCH;
      now = nowNs();
    }
    consume(fold);
    return { ids, calls: ids, elapsedNs: now - start };
  };
}

/**
 * Collects `out.length` IDs with `nextIdSync()`, turning the loop every 65,536 calls (the keep-alives). A source
 * refusing for a whole second stops the benchmark: its figures would not be the embedded path's.
 */
async function collectSync(source: EmbeddedIdSource, out: BigUint64Array): Promise<void> {
  let refusingSince: number | undefined;
  for (let i = 0, calls = 1; i < out.length; calls++) {
    try {
      out[i] = source.nextIdSync();
      i++;
      refusingSince = undefined;
    } catch (error) {
      if (!isIdsUnavailableError(error)) throw error;
      counts.refusals++;
      refusingSince ??= nowNs();
      if (nowNs() - refusingSince > 1e9) throw new Error(`the embedded source refused for over 1 s: ${error.message}`);
    }
    if ((calls & 0xffff) === 0) await turn();
  }
}

/** Times `samples` sequential awaited calls; each call's nanoseconds (timer cost included). */
async function latencies(next: NextId, samples: number): Promise<number[]> {
  const out = new Array<number>(samples);
  for (let i = 0; i < samples; i++) {
    const start = nowNs();
    await next();
    out[i] = nowNs() - start;
    if ((i & 0x3fff) === 0) await turn();
  }
  return out;
}

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

/** One caller awaiting each ID in turn for `seconds` (the loop turns every 50 ms for the keep-alives); IDs/s. */
async function sustained(next: NextId, seconds: number): Promise<number> {
  let ids = 0;
  let fold = 0n;
  const start = nowNs();
  const end = start + seconds * 1e9;
  let nextTurn = start + 50e6;
  for (let now = start; now < end; now = nowNs()) {
    for (let i = 0; i < 64; i++) fold ^= await next();
    ids += 64;
    if (now >= nextTurn) {
      await turn();
      nextTurn = now + 50e6;
    }
  }
  consume(fold);
  return (ids * 1e9) / (nowNs() - start);
}

async function main(): Promise<void> {
  const args = parseBenchArgs(process.argv.slice(2), { rounds: 7, roundMs: 400, check: 4_096_000, seconds: 5 });
  const options = { rounds: args.rounds, roundMs: args.roundMs, warmupRounds: 1 };
  buildServer();
  process.stdout.write(
    `bench:embedded: ${describeMachine()}\n` +
      `a real etcd and one local standalone node on loopback; this script, etcd and the node share the machine's cores.\n` +
      `${args.rounds} rounds of ${args.roundMs} ms per synchronous case (median, after 1 warm-up round; the cases interleaved round by round, ` +
      `a 5 ms pause between rounds for the lease's keep-alives); duplicates over ${formatCount(args.check)} IDs; ${args.seconds} s per sustained case.\n` +
      `Ceiling of one worker: ${formatCount(CEILING)} IDs/s.\n\n`,
  );
  const servers: ProcessHandle[] = [];
  let source: EmbeddedIdSource | undefined;
  try {
    const etcd = await startEtcd();
    await bindRegion(etcd, REGION); // idgen region init, before the region's first holder
    source = createEmbeddedIdSource({ etcd: { endpoints: [etcd.clientUrl] }, region: REGION, timeSource: 'none' });
    await source.ready();
    const embedded = source;
    const port = await freePort();
    servers.push(await startIdgenServer(port));
    const client = createIdClient({ region: 0, nodes: [`http://127.0.0.1:${port}`] });

    // Synchronous path: the bare core and the bare guard (no lease) are the baselines of the same run.
    const guard = createGuardedMinter({ region: REGION, clock: systemClock });
    guard.assign({
      region: REGION,
      worker: 17,
      floorMs: 0,
      deadlineMonoMs: Number.POSITIVE_INFINITY,
      ceilingMs: Number.POSITIVE_INFINITY,
    });
    const [bare, guarded, sync] = (await runInterleaved(
      [
        coreSingleRound(createMinter({ region: REGION, worker: 17 })),
        guardSingleRound(() => guard.next()),
        embeddedSyncRound(embedded, counts),
      ],
      options,
    )) as [RoundsReport, RoundsReport, RoundsReport];
    guard.close();
    const checked = new BigUint64Array(args.check);
    await collectSync(embedded, checked);
    const duplicates = countDuplicates(checked);

    // Asynchronous path, per call: the embedded source against the buffered client on a real node.
    const embeddedAsync: NextId = () => embedded.nextId();
    const clientAsync: NextId = () => client.nextId();
    await sustained(embeddedAsync, 1); // warm-up (JIT; the client's demand-sized buffer and HTTP/2 session)
    await sustained(clientAsync, 1);
    const floor = summarize(await timerFloor(LATENCY_SAMPLES));
    const embeddedLatency = summarize(await latencies(embeddedAsync, LATENCY_SAMPLES));
    const clientLatency = summarize(await latencies(clientAsync, LATENCY_SAMPLES));
    const embeddedRate = await sustained(embeddedAsync, args.seconds);
    const clientRate = await sustained(clientAsync, args.seconds);
    const stats = client.stats();
    await client.close();
    const status = embedded.status();

    process.stdout.write('Synchronous single-ID path (real clock, each ID consumed as minted)\n');
    process.stdout.write(
      formatTable(
        [
          { header: 'path' },
          { header: 'IDs/s', align: 'right' },
          { header: 'share of ceiling', align: 'right' },
          { header: 'min-max of rounds', align: 'right' },
          { header: 'cost per ID', align: 'right' },
        ],
        [
          [
            '@idgen/core mintOne(Date.now()) (no lease)',
            formatCount(bare.medianIdsPerSecond),
            formatShare(bare.medianIdsPerSecond, CEILING),
            `${formatCount(bare.minIdsPerSecond)}-${formatCount(bare.maxIdsPerSecond)}`,
            formatNanoseconds(bare.medianNsPerCall),
          ],
          [
            '@idgen/clock-guard next() (no lease)',
            formatCount(guarded.medianIdsPerSecond),
            formatShare(guarded.medianIdsPerSecond, CEILING),
            `${formatCount(guarded.minIdsPerSecond)}-${formatCount(guarded.maxIdsPerSecond)}`,
            formatNanoseconds(guarded.medianNsPerCall),
          ],
          [
            `@idgen/embedded nextIdSync() (slot ${REGION}/${String(status.worker)} from etcd)`,
            formatCount(sync.medianIdsPerSecond),
            formatShare(sync.medianIdsPerSecond, CEILING),
            `${formatCount(sync.minIdsPerSecond)}-${formatCount(sync.maxIdsPerSecond)}`,
            formatNanoseconds(sync.medianNsPerCall),
          ],
        ],
      ),
    );
    process.stdout.write(
      `nextIdSync() duplicates: ${formatCount(duplicates)} / ${formatCount(checked.length)}; refusals during the run: ${counts.refusals}\n` +
        '(cost per ID at the ceiling includes the wait for the next millisecond: 244 ns is 4,096 IDs in 1 ms)\n',
    );

    process.stdout.write('\nAsynchronous: one await per ID, one caller (sequential)\n');
    process.stdout.write(
      formatTable(
        [
          { header: 'call' },
          { header: 'median', align: 'right' },
          { header: 'p99', align: 'right' },
          { header: 'samples', align: 'right' },
          { header: 'sustained IDs/s', align: 'right' },
        ],
        [
          [
            'await embedded.nextId()',
            formatNanoseconds(embeddedLatency.median),
            formatNanoseconds(embeddedLatency.p99),
            formatCount(embeddedLatency.count),
            formatCount(embeddedRate),
          ],
          [
            'await client.nextId() (@idgen/client, buffered, real node)',
            formatNanoseconds(clientLatency.median),
            formatNanoseconds(clientLatency.p99),
            formatCount(clientLatency.count),
            formatCount(clientRate),
          ],
          [
            '(timer around an awaited resolved promise)',
            formatNanoseconds(floor.median),
            formatNanoseconds(floor.p99),
            formatCount(floor.count),
            '',
          ],
        ],
      ),
    );
    process.stdout.write(
      `client counters: ${JSON.stringify({ hits: stats.hits, misses: stats.misses, refills: stats.refills })}; ` +
        `embedded sustained = ${formatShare(embeddedRate, CEILING)} of the ceiling, ×${(embeddedRate / clientRate).toFixed(1)} the client's\n`,
    );
    const share = sync.medianIdsPerSecond / CEILING;
    process.stdout.write(
      `\nTarget: nextIdSync() ≥ 95% of one worker's ${formatCount(CEILING)} IDs/s with 0 duplicates: ` +
        `${formatShare(sync.medianIdsPerSecond, CEILING)}, ${duplicates} duplicates: ${share >= 0.95 && duplicates === 0 ? 'MET' : 'NOT MET'}\n`,
    );
    process.stdout.write(`(sink checksum ${sinkChecksum() & 0xffffn}: keeps the JIT from dropping the work)\n`);
  } finally {
    await source?.close();
    for (const server of servers) await server.stop(5000);
    await cleanupAll();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench:embedded failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
