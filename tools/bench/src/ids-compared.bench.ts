/**
 * `npm run bench:ids`: "Why not UUIDv7?" (issue 25, item 6). Node 24's `crypto.randomUUIDv7()` and the npm `uuid`
 * package's `v7()` side by side in the same run with idgen's three ways to mint: the core's minter (what a node or
 * an embedded source runs), `@idgen/embedded`'s `nextIdSync()` on a slot leased from a real etcd, and
 * `@idgen/client`'s buffered `await nextId()` against a real local node.
 *
 * One table: bytes per ID, the ordering each promises and the out-of-order pairs measured over consecutive calls in
 * this process, the fields an ID can be decoded into, IDs/s (median of interleaved rounds, with the spread) as a
 * ratio to `crypto.randomUUIDv7()`, and the infrastructure each needs.
 *
 * Knobs: those of every benchmark (`--rounds`, `--round-ms`; `--check N` is the size of the ordering sample, default
 * 1,000,000), and `--no-build`, which starts the server already in `apps/server/dist/` (the spec builds it once).
 */
import { randomUUIDv7 } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createIdClient, type IdClient } from '@idgen/client';
import { DEFAULT_LAYOUT, createMinter } from '@idgen/core';
import { createEmbeddedIdSource, isIdsUnavailableError, type EmbeddedIdSource } from '@idgen/embedded';
import { type ProcessHandle, bindRegion, cleanupAll, freePort, startEtcd } from '@idgen/testing';
import { v7 as uuidV7 } from 'uuid';
import { BATCH, consume, coreSingleRound, sinkChecksum } from './core-loops.js';
import { ceilingIdsPerSecond, describeMachine, parseBenchArgs } from './environment.js';
import { type RefusalCount, embeddedSyncRound } from './embedded-loops.js';
import { buildServer, startIdgenServer } from './idgen-server.js';
import { type Round, nowNs, runRounds } from './rounds.js';
import { median } from './stats.js';
import { formatCount, formatShare, formatTable } from './table.js';

const CEILING = ceilingIdsPerSecond(DEFAULT_LAYOUT);
const REGION = 2;
const UUID_VERSION = (JSON.parse(readFileSync(require.resolve('uuid/package.json'), 'utf8')) as { version: string })
  .version;

/** Out-of-order and equal pairs among consecutive IDs of one sample. */
interface OrderCount {
  /** Consecutive pairs (a, b) with b < a: the second ID sorts before the first. */
  readonly outOfOrder: number;
  /** Consecutive pairs with b = a (a duplicate next to its twin). */
  readonly equal: number;
  /** Pairs compared: the sample size minus one. */
  readonly pairs: number;
}

/** One generator of the table: what it is, how one round of it is timed, and how its ordering is sampled. */
interface Generator {
  readonly name: string;
  readonly bytes: string;
  readonly promise: string;
  readonly decodable: string;
  readonly needs: string;
  /** One timed round of about `budgetMs`: IDs/s, each ID consumed as produced. */
  readonly round: (budgetMs: number) => Promise<number>;
  /** `n` consecutive calls in this process, compared pair by pair. */
  readonly order: (n: number) => Promise<OrderCount>;
}

/** Refusals (IdsUnavailableError) the embedded source gave: each is an ID not handed out. */
const counts: RefusalCount = { refusals: 0 };
let stringSink = 0;

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/** Between rounds: the embedded source's keep-alives (two round trips to etcd) need the loop free for a while. */
const pause = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5));

/**
 * A synchronous round timed by `runRounds` itself (one round, no warm-up: the interleaving in {@link measure} does
 * the warm-up and the repetition), so these figures come from the same timer as every other benchmark's.
 */
const timed =
  (round: Round) =>
  (budgetMs: number): Promise<number> =>
    Promise.resolve(runRounds(round, { rounds: 1, warmupRounds: 0, roundMs: budgetMs }).medianIdsPerSecond);

// Each loop is its own function literal: one generic loop calling a different generator would turn megamorphic
// and measure V8's inline caches (core-loops.ts). A UUID is folded by one of its random characters, so the JIT
// cannot drop the call that made it.
const cryptoRound: Round = (budgetMs) => {
  let fold = 0;
  let ids = 0;
  const start = nowNs();
  const end = start + budgetMs * 1e6;
  let now = start;
  while (now < end) {
    for (let i = 0; i < BATCH; i++) fold ^= randomUUIDv7().charCodeAt(35);
    ids += BATCH;
    now = nowNs();
  }
  stringSink ^= fold;
  return { ids, calls: ids, elapsedNs: now - start };
};

const uuidRound: Round = (budgetMs) => {
  let fold = 0;
  let ids = 0;
  const start = nowNs();
  const end = start + budgetMs * 1e6;
  let now = start;
  while (now < end) {
    for (let i = 0; i < BATCH; i++) fold ^= uuidV7().charCodeAt(35);
    ids += BATCH;
    now = nowNs();
  }
  stringSink ^= fold;
  return { ids, calls: ids, elapsedNs: now - start };
};

/** One caller awaiting each buffered ID in turn for about `budgetMs`; the clock is read every 64 IDs. */
async function clientRound(client: IdClient, budgetMs: number): Promise<number> {
  let fold = 0n;
  let ids = 0;
  const start = nowNs();
  const end = start + budgetMs * 1e6;
  let now = start;
  while (now < end) {
    for (let i = 0; i < 64; i++) fold ^= await client.nextId();
    ids += 64;
    now = nowNs();
  }
  consume(fold);
  return (ids * 1e9) / (now - start);
}

/**
 * Counts the out-of-order and equal pairs among `n` consecutive IDs from `next`, turning the loop every 65,536 calls
 * (the embedded source's keep-alives run on it). UUIDs compare as their canonical lowercase text, which sorts as
 * their bytes do. A generator refusing for a whole second stops the benchmark instead of waiting on it.
 */
async function countOrder<T extends string | bigint>(next: () => T | Promise<T>, n: number): Promise<OrderCount> {
  let outOfOrder = 0;
  let equal = 0;
  let previous: T | undefined;
  let refusingSince: number | undefined;
  for (let i = 0, calls = 1; i < n; calls++) {
    if ((calls & 0xffff) === 0) await turn();
    let id: T;
    try {
      id = await next();
      refusingSince = undefined;
    } catch (error) {
      if (!isIdsUnavailableError(error)) throw error;
      counts.refusals++;
      refusingSince ??= nowNs();
      if (nowNs() - refusingSince > 1e9) throw new Error(`the generator refused for over 1 s: ${error.message}`);
      continue;
    }
    if (previous !== undefined) {
      if (id < previous) outOfOrder++;
      else if (id === previous) equal++;
    }
    previous = id;
    i++;
  }
  return { outOfOrder, equal, pairs: Math.max(0, n - 1) };
}

/** What {@link measure} reports for one generator. */
interface Measured {
  readonly rates: number[];
  /** This generator's rate over `crypto.randomUUIDv7()`'s in the same round cycle, one per cycle. */
  readonly ratios: number[];
}

/**
 * Runs every generator's rounds interleaved (all generators, then all again …), so a burst of load from elsewhere on
 * this shared machine lands on every row alike, and reports each round's rate and its ratio to the first generator's
 * rate in the same cycle (the baseline). One untimed warm-up cycle first (JIT, the client's buffer and session).
 */
async function measure(generators: readonly Generator[], rounds: number, roundMs: number): Promise<Measured[]> {
  for (const generator of generators) {
    await generator.round(roundMs);
    await pause();
  }
  const out = generators.map((): Measured => ({ rates: [], ratios: [] }));
  for (let r = 0; r < rounds; r++) {
    const cycle: number[] = [];
    for (const generator of generators) {
      cycle.push(await generator.round(roundMs));
      await pause();
    }
    const baseline = cycle[0] as number;
    cycle.forEach((rate, k) => {
      out[k]?.rates.push(rate);
      out[k]?.ratios.push(rate / baseline);
    });
  }
  return out;
}

function generators(embedded: EmbeddedIdSource, client: IdClient, worker: string): Generator[] {
  const core = createMinter({ region: REGION, worker: 17 });
  const mintOne = (): bigint => {
    let id = core.mintOne(Date.now());
    while (typeof id !== 'bigint') id = core.mintOne(Date.now());
    return id;
  };
  const idgenBytes = '8 (≤ 19 as text)';
  const idgenFields = 'timestamp, region, worker, sequence';
  return [
    {
      name: `crypto.randomUUIDv7() (node ${process.version})`,
      bytes: '16 (36 as text)',
      promise: 'ms timestamp; random within a ms',
      decodable: 'timestamp (ms)',
      needs: 'none',
      round: timed(cryptoRound),
      order: (n) => countOrder(() => randomUUIDv7(), n),
    },
    {
      name: `uuid ${UUID_VERSION} v7()`,
      bytes: '16 (36 as text)',
      promise: 'monotonic per process (counter in a ms)',
      decodable: 'timestamp (ms)',
      needs: 'none (one npm package)',
      round: timed(uuidRound),
      order: (n) => countOrder(() => uuidV7(), n),
    },
    {
      name: '@idgen/core mintOne(Date.now())',
      bytes: idgenBytes,
      promise: 'strictly increasing per worker',
      decodable: idgenFields,
      needs: 'a leased worker slot (runs inside the two below)',
      round: timed(coreSingleRound(core)),
      order: (n) => countOrder(mintOne, n),
    },
    {
      name: `@idgen/embedded nextIdSync() (slot ${REGION}/${worker})`,
      bytes: idgenBytes,
      promise: 'strictly increasing per worker (= per process)',
      decodable: idgenFields,
      needs: 'etcd',
      round: timed(embeddedSyncRound(embedded, counts)),
      order: (n) => countOrder(() => embedded.nextIdSync(), n),
    },
    {
      name: '@idgen/client await nextId() (buffered, 1 node)',
      bytes: idgenBytes,
      promise: 'per worker; several nodes: roughly by time',
      decodable: idgenFields,
      needs: 'etcd + idgen nodes (standalone here)',
      round: (budgetMs) => clientRound(client, budgetMs),
      order: (n) => countOrder(() => client.nextId(), n),
    },
  ];
}

/** The table: one row per generator, every figure from this run. */
function table(rows: readonly Generator[], measured: readonly Measured[], orders: readonly OrderCount[]): string {
  return formatTable(
    [
      { header: 'generator' },
      { header: 'bytes per ID' },
      { header: 'ordering promised' },
      { header: 'out of order / pairs', align: 'right' },
      { header: 'decodable fields' },
      { header: 'IDs/s (median)', align: 'right' },
      { header: 'min-max of rounds', align: 'right' },
      { header: '× randomUUIDv7()', align: 'right' },
      { header: 'infrastructure' },
    ],
    rows.map((generator, k) => {
      const m = measured[k] as Measured;
      const o = orders[k] as OrderCount;
      const equal = o.equal === 0 ? '' : ` (+${formatCount(o.equal)} equal)`;
      return [
        generator.name,
        generator.bytes,
        generator.promise,
        `${formatCount(o.outOfOrder)} / ${formatCount(o.pairs)}${equal}`,
        generator.decodable,
        formatCount(median(m.rates)),
        `${formatCount(Math.min(...m.rates))}-${formatCount(Math.max(...m.rates))}`,
        `×${median(m.ratios).toFixed(2)}`,
        generator.needs,
      ];
    }),
  );
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const noBuild = argv.includes('--no-build');
  const args = parseBenchArgs(
    argv.filter((a) => a !== '--no-build'),
    { rounds: 7, roundMs: 300, check: 1_000_000, seconds: 1 },
  );
  if (!noBuild) buildServer();
  process.stdout.write(
    `bench:ids: ${describeMachine()}\n` +
      `a real etcd and one local standalone node on loopback; this script, etcd and the node share the machine's cores.\n` +
      `${args.rounds} rounds of ${args.roundMs} ms per generator (median, after 1 warm-up round; the generators interleaved ` +
      `round by round, a 5 ms pause between rounds for the lease's keep-alives); ordering over ${formatCount(args.check)} ` +
      `consecutive calls per generator in this process.\n\n`,
  );
  const servers: ProcessHandle[] = [];
  let source: EmbeddedIdSource | undefined;
  let client: IdClient | undefined;
  try {
    const etcd = await startEtcd();
    await bindRegion(etcd, REGION); // idgen region init, before the region's first holder
    source = createEmbeddedIdSource({ etcd: { endpoints: [etcd.clientUrl] }, region: REGION, timeSource: 'none' });
    await source.ready();
    const port = await freePort();
    servers.push(await startIdgenServer(port));
    client = createIdClient({ region: 0, nodes: [`http://127.0.0.1:${port}`] });

    const rows = generators(source, client, String(source.status().worker));
    const measured = await measure(rows, args.rounds, args.roundMs);
    const orders: OrderCount[] = [];
    for (const generator of rows) orders.push(await generator.order(args.check));

    process.stdout.write('Why not UUIDv7? (one run; IDs/s with each ID consumed as produced, one caller)\n');
    process.stdout.write(table(rows, measured, orders));
    process.stdout.write(
      `out of order: consecutive pairs (a, b) with b < a among ${formatCount(args.check)} consecutive calls, in one process ` +
        `(text order for UUIDs, which is their byte order).\n` +
        `× randomUUIDv7(): median over the rounds of each round's rate over crypto.randomUUIDv7()'s in the same cycle.\n` +
        `idgen's core and embedded rows are capped by one worker's ceiling, ${formatCount(CEILING)} IDs/s ` +
        `(4,096 sequence values per ms, docs/design.md §1): ` +
        `${formatShare(median(measured[3]?.rates ?? [0]), CEILING)} of it for nextIdSync() (a round of ${args.roundMs} ms can span ${args.roundMs + 2} values of ` +
        `Date.now(), so it may read up to ${formatShare(2, args.roundMs)} over); more IDs/s take more workers.\n` +
        `embedded refusals during the run: ${counts.refusals}; client counters: ${JSON.stringify(pick(client))}\n`,
    );
    process.stdout.write(
      `(sink checksum ${(sinkChecksum() ^ BigInt(stringSink)) & 0xffffn}: keeps the JIT from dropping the work)\n`,
    );
  } finally {
    await client?.close();
    await source?.close();
    for (const server of servers) await server.stop(5000);
    await cleanupAll();
  }
}

function pick(client: IdClient): { hits: number; misses: number; refills: number } {
  const stats = client.stats();
  return { hits: stats.hits, misses: stats.misses, refills: stats.refills };
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench:ids failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
