/**
 * `npm run bench:core`: the core's minting state machine against three npm Snowflake generators, side
 * by side in one process and one run (issue 2, "Benchmark").
 *
 * Table 1, the single-ID path: IDs/s with each ID consumed as minted (median of several rounds), share
 * of the 4,096,000 IDs/s ceiling of one worker, and duplicates found in a separate pass over a few
 * million IDs per implementation. Table 2, the block path: IDs/s by block size with `Date.now()` (capped
 * by the ceiling), and the cost of one call with a clock that never waits (shows that a block's cost does
 * not grow with its size). Table 3, the ID forms (issue 35): nanoseconds to format and to parse one ID in each
 * form, beside `BigInt.prototype.toString()` and `BigInt(text)` in the same run.
 */
import { DEFAULT_LAYOUT, type Minter, createKeyedForm, createMinter } from '@idgen/core';
import { Snowflake as SapphireSnowflake } from '@sapphire/snowflake';
import FlakeId from 'flake-idgen';
import { Snowflake as WasmSnowflake } from 'nodejs-snowflake';
import {
  BATCH,
  coreBlockComputeRound,
  coreBlockRound,
  coreSingleComputeRound,
  coreSingleRound,
  collectCoreBlocks,
  collectCoreSingle,
  consume,
  sinkChecksum,
} from './core-loops.js';
import { formLoops } from './forms-loops.js';
import { ceilingIdsPerSecond, describeMachine, parseBenchArgs } from './environment.js';
import { type Round, type RoundsReport, nowNs, runRounds } from './rounds.js';
import { countDuplicates } from './stats.js';
import { formatCount, formatNanoseconds, formatShare, formatTable } from './table.js';

const CEILING = ceilingIdsPerSecond(DEFAULT_LAYOUT);
const EPOCH_MS = DEFAULT_LAYOUT.epochMs;
const REGION = 2;
const WORKER = 17;

/** One implementation in the single-ID table. */
interface SingleCase {
  readonly name: string;
  readonly note: string;
  readonly round: Round;
  readonly collect: (out: BigUint64Array) => void;
}

function sapphireCase(): SingleCase {
  // @sapphire/snowflake: 42-bit timestamp, 5-bit worker, 5-bit process, 12-bit increment that wraps
  // without looking at the clock, so more than 4,096 IDs in one millisecond repeat earlier ones.
  const snowflake = new SapphireSnowflake(EPOCH_MS);
  return {
    name: '@sapphire/snowflake 3.5.5',
    note: '12-bit counter wraps without waiting for the next ms',
    round: (budgetMs) => {
      let fold = 0n;
      let ids = 0;
      const start = nowNs();
      const end = start + budgetMs * 1e6;
      let now = start;
      while (now < end) {
        for (let i = 0; i < BATCH; i++) fold ^= snowflake.generate();
        ids += BATCH;
        now = nowNs();
      }
      consume(fold);
      return { ids, calls: ids, elapsedNs: now - start };
    },
    collect: (out) => {
      for (let i = 0; i < out.length; i++) out[i] = snowflake.generate();
    },
  };
}

function wasmCase(): SingleCase {
  // nodejs-snowflake (Rust → WASM): 12-bit instance id and a 10-bit sequence, so its own ceiling is
  // 1,024,000 IDs/s; it blocks inside WASM when the sequence of a millisecond is spent.
  const snowflake = new WasmSnowflake({ custom_epoch: EPOCH_MS, instance_id: WORKER });
  // The generated typings say `BigInt` (the wrapper object type); the value is a primitive bigint.
  const next = (): bigint => snowflake.getUniqueID() as unknown as bigint;
  return {
    name: 'nodejs-snowflake 2.0.1',
    note: '10-bit sequence: its own ceiling is 1,024,000 IDs/s',
    round: (budgetMs) => {
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
    },
    collect: (out) => {
      for (let i = 0; i < out.length; i++) out[i] = next();
    },
  };
}

function flakeCase(): SingleCase {
  // flake-idgen: 42-bit timestamp, 10-bit generator id, 12-bit sequence; returns an 8-byte Buffer and
  // throws when the sequence of a millisecond is spent (no callback given), so the caller retries. The
  // Buffer is read as a bigint: that is the ID a caller of the others gets.
  const generator = new FlakeId({ id: WORKER, epoch: EPOCH_MS });
  const next = (): bigint => {
    for (;;) {
      try {
        return generator.next().readBigUInt64BE(0);
      } catch {
        // sequence spent in this millisecond: the next call is the wait
      }
    }
  };
  return {
    name: 'flake-idgen 1.4.0',
    note: 'throws when the ms is spent; the loop retries',
    round: (budgetMs) => {
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
    },
    collect: (out) => {
      for (let i = 0; i < out.length; i++) out[i] = next();
    },
  };
}

function idgenSingleCase(): SingleCase {
  const minter = createMinter({ region: REGION, worker: WORKER });
  return {
    name: '@idgen/core mintOne',
    note: 'waits for the next ms when the sequence is spent',
    round: coreSingleRound(minter),
    collect: (out) => collectCoreSingle(minter, out),
  };
}

function duplicatesOf(collect: (out: BigUint64Array) => void, check: number): number {
  const ids = new BigUint64Array(check);
  collect(ids);
  return countDuplicates(ids);
}

function rateCell(report: RoundsReport): string {
  return formatCount(report.medianIdsPerSecond);
}

function spreadCell(report: RoundsReport): string {
  return `${formatCount(report.minIdsPerSecond)} … ${formatCount(report.maxIdsPerSecond)}`;
}

type RoundOptions = Parameters<typeof runRounds>[1];
type BenchArgs = ReturnType<typeof parseBenchArgs>;
type SingleResult = { report: RoundsReport; duplicates: number } | undefined;

/** Table 1: the single-ID path of each implementation, side by side; returns idgen's row for the verdict. */
function singleIdTable(args: BenchArgs, options: RoundOptions): SingleResult {
  const singles = [idgenSingleCase(), sapphireCase(), wasmCase(), flakeCase()];
  const singleRows: string[][] = [];
  let idgenSingle: { report: RoundsReport; duplicates: number } | undefined;
  for (const c of singles) {
    const report = runRounds(c.round, options);
    const duplicates = duplicatesOf(c.collect, args.check);
    if (idgenSingle === undefined) idgenSingle = { report, duplicates };
    singleRows.push([
      c.name,
      rateCell(report),
      spreadCell(report),
      formatNanoseconds(1e9 / report.medianIdsPerSecond),
      formatShare(report.medianIdsPerSecond, CEILING),
      `${formatCount(duplicates)} / ${formatCount(args.check)}`,
      c.note,
    ]);
  }
  process.stdout.write('Single-ID path (one call per ID, each ID consumed as minted)\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'implementation' },
        { header: 'IDs/s (median)', align: 'right' },
        { header: 'rounds min … max', align: 'right' },
        { header: 'per ID', align: 'right' },
        { header: 'share of ceiling', align: 'right' },
        { header: 'duplicates / checked', align: 'right' },
        { header: 'note' },
      ],
      singleRows,
    ),
  );

  return idgenSingle;
}

/** Table 2: the block path by block size, with the real clock and with clocks that never wait; ns per new-ms call. */
function blockTable(args: BenchArgs, options: RoundOptions): number[] {
  const blockRows: string[][] = [];
  const newMsNsPerCall: number[] = [];
  const cases: { label: string; size: number | undefined }[] = [
    { label: 'mintOne (for reference)', size: undefined },
    { label: 'mintBlock(now, 1)', size: 1 },
    { label: 'mintBlock(now, 64)', size: 64 },
    { label: 'mintBlock(now, 4096)', size: 4096 },
  ];
  const fresh = (): Minter => createMinter({ region: REGION, worker: WORKER });
  for (const { label, size } of cases) {
    const clocked = size === undefined ? undefined : runRounds(coreBlockRound(fresh(), size), options);
    // A block of 4,096 fills its millisecond: it has no same-millisecond path to measure.
    const sameMs =
      size === 4096
        ? undefined
        : runRounds(
            size === undefined
              ? coreSingleComputeRound(fresh(), 'same-ms')
              : coreBlockComputeRound(fresh(), size, 'same-ms'),
            options,
          );
    const newMs = runRounds(
      size === undefined ? coreSingleComputeRound(fresh(), 'new-ms') : coreBlockComputeRound(fresh(), size, 'new-ms'),
      options,
    );
    newMsNsPerCall.push(newMs.medianNsPerCall);
    const duplicates =
      size === undefined ? undefined : duplicatesOf((out) => collectCoreBlocks(fresh(), size, out), args.check);
    blockRows.push([
      label,
      clocked === undefined ? '(table 1)' : rateCell(clocked),
      clocked === undefined ? '' : formatShare(clocked.medianIdsPerSecond, CEILING),
      sameMs === undefined ? '—' : formatNanoseconds(sameMs.medianNsPerCall),
      formatNanoseconds(newMs.medianNsPerCall),
      formatCount(newMs.medianIdsPerSecond),
      duplicates === undefined ? '(table 1)' : `${formatCount(duplicates)} / ${formatCount(args.check)}`,
    ]);
  }
  process.stdout.write('\nBlock path (@idgen/core mintBlock; a block is consumed as its first ID and count)\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'call' },
        { header: 'IDs/s with Date.now()', align: 'right' },
        { header: 'share of ceiling', align: 'right' },
        { header: 'per call, same ms*', align: 'right' },
        { header: 'per call, new ms*', align: 'right' },
        { header: 'IDs/s, new ms*', align: 'right' },
        { header: 'duplicates / checked', align: 'right' },
      ],
      blockRows,
    ),
  );
  process.stdout.write(
    '* with a clock that never waits, read on every call: "same ms" moves it on by 1 ms only when the\n' +
      '  sequence is spent (the path most calls take at full load); "new ms" moves it on every call (the path\n' +
      '  a block that fills its millisecond always takes). The cost of one call on its own, not held back by\n' +
      '  the ceiling: not a rate one worker can serve.\n',
  );

  return newMsNsPerCall;
}

/** Table 3: the ID forms beside the bigint's own decimal conversion, over one worker's IDs of 4,096 ms. */
function formsTable(options: RoundOptions): void {
  const pool: bigint[] = [];
  const poolMinter = createMinter({ region: REGION, worker: WORKER });
  for (let ms = 0; pool.length < 4096; ms++) {
    const id = poolMinter.mintOne(EPOCH_MS + 24_831_000_123 + ms * 7);
    if (typeof id === 'bigint') pool.push(id);
  }
  const formRows: string[][] = [];
  let baselineFormat = Number.NaN;
  let baselineParse = Number.NaN;
  for (const loops of formLoops(pool, createKeyedForm('000102030405060708090a0b0c0d0e0f'))) {
    const format = runRounds(loops.format, options).medianNsPerCall;
    const parse = runRounds(loops.parse, options).medianNsPerCall;
    if (Number.isNaN(baselineFormat)) {
      baselineFormat = format;
      baselineParse = parse;
    }
    formRows.push([
      loops.name,
      formatNanoseconds(format),
      `×${(format / baselineFormat).toFixed(2)}`,
      formatNanoseconds(parse),
      `×${(parse / baselineParse).toFixed(2)}`,
    ]);
  }
  process.stdout.write('\nID forms (one ID each way; ratios against the baseline row of this run)\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'form' },
        { header: 'format, per ID', align: 'right' },
        { header: 'vs toString()', align: 'right' },
        { header: 'parse, per ID', align: 'right' },
        { header: 'vs BigInt(text)', align: 'right' },
      ],
      formRows,
    ),
  );
}

/** The verdicts against the targets of issue 2. */
function verdicts(idgenSingle: SingleResult, newMsNsPerCall: readonly number[]): void {
  if (idgenSingle !== undefined) {
    const share = idgenSingle.report.medianIdsPerSecond / CEILING;
    const met = share >= 0.95 && idgenSingle.duplicates === 0;
    process.stdout.write(
      `\nTarget: single-ID path ≥ 95% of the ceiling with zero duplicates: ` +
        `${formatShare(share, 1)}, ${idgenSingle.duplicates} duplicates: ${met ? 'MET' : 'NOT MET'}\n`,
    );
  }
  const one = newMsNsPerCall[1] ?? Number.NaN;
  const largest = newMsNsPerCall[3] ?? Number.NaN;
  process.stdout.write(
    `Target: a block of 4,096 costs about what a block of 1 costs (each call in a new ms): ` +
      `${formatNanoseconds(largest)} vs ${formatNanoseconds(one)} per call (×${(largest / one).toFixed(2)})\n`,
  );
  process.stdout.write(`(sink checksum ${sinkChecksum() & 0xffffn}: keeps the JIT from dropping the work)\n`);
}

function main(): void {
  const args = parseBenchArgs(process.argv.slice(2), { rounds: 5, roundMs: 500, check: 4_096_000, seconds: 10 });
  const options = { rounds: args.rounds, roundMs: args.roundMs, warmupRounds: 1 };
  process.stdout.write(
    `bench:core: ${describeMachine()}\n` +
      `${args.rounds} rounds of ${args.roundMs} ms per case (median reported, after 1 warm-up round); ` +
      `duplicates counted over ${formatCount(args.check)} IDs per case in a separate pass.\n` +
      `Ceiling of one worker: ${formatCount(CEILING)} IDs/s (4,096 sequence values per millisecond).\n\n`,
  );

  const idgenSingle = singleIdTable(args, options);
  const newMsNsPerCall = blockTable(args, options);
  formsTable(options);
  verdicts(idgenSingle, newMsNsPerCall);
}

main();
