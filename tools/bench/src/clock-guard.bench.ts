/**
 * `npm run bench:clock-guard`: the guarded single-ID path (`GuardedMinter.next()`) side by side with the
 * bare core path (`Minter.mintOne(Date.now())`) in the same run (issue 3, "Benchmark"), and the same for
 * blocks (`nextBlock(n)` against `mintBlock(now, n)`).
 *
 * With the real clock both paths reach the 4,096,000 IDs/s ceiling of one worker, where throughput cannot
 * show a difference; so each case is also measured with a clock that never makes it wait, which gives the
 * cost of one call and the guard's overhead over the bare core (target ≤ 10%), and the share of a core
 * each path keeps busy at the ceiling.
 */
import {
  type ClockSource,
  type GuardedMinter,
  createGuardedMinter,
  isFencedError,
  systemClock,
} from '@idgen/clock-guard';
import { DEFAULT_LAYOUT, type Minter, createMinter } from '@idgen/core';
import { BATCH, collectCoreSingle, consume, coreBlockRound, coreSingleRound, sinkChecksum } from './core-loops.js';
import { ceilingIdsPerSecond, describeMachine, parseBenchArgs } from './environment.js';
import { type Round, type RoundsReport, nowNs, runRounds } from './rounds.js';
import { countDuplicates } from './stats.js';
import { formatCount, formatNanoseconds, formatShare, formatTable } from './table.js';

const CEILING = ceilingIdsPerSecond(DEFAULT_LAYOUT);
const REGION = 2;
const WORKER = 17;
const PER_MS = DEFAULT_LAYOUT.maxSequence + 1;

/** Mints the guard refused (FencedError) during the run: a server answers these with UNAVAILABLE. */
let refusals = 0;

/**
 * A wall clock that never makes the minter wait: `Date.now()` plus a skew that grows by one millisecond
 * after every `readsPerMs` reads. With one read per ID and `readsPerMs` = 4,096, each millisecond holds
 * exactly the IDs its sequence allows and the sequence is never found spent. Still a real read of the
 * clock per call, and the real monotonic clock, so the guard's own checks cost what they cost.
 */
function neverWaitingClock(readsPerMs: number): ClockSource {
  let reads = 0;
  let skew = 0;
  return {
    nowMs() {
      if (++reads >= readsPerMs) {
        reads = 0;
        skew++;
      }
      return Date.now() + skew;
    },
    monoMs: () => performance.now(),
  };
}

function guardOver(clock: ClockSource): GuardedMinter {
  const guard = createGuardedMinter({ region: REGION, clock });
  // What the lease does once it holds a slot (docs/design.md §5): an infinite deadline, because this benchmark
  // has no lease to keep alive; the deadline is still compared on every mint.
  guard.assign({
    region: REGION,
    worker: WORKER,
    floorMs: 0,
    deadlineMonoMs: Number.POSITIVE_INFINITY,
    ceilingMs: Number.POSITIVE_INFINITY,
  });
  return guard;
}

/** The bare core path reading the given clock: the baseline the guard is compared with. */
function coreClockSingleRound(minter: Minter, clock: ClockSource): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let i = 0; i < BATCH; i++) {
        let id = minter.mintOne(clock.nowMs());
        while (typeof id !== 'bigint') id = minter.mintOne(clock.nowMs());
        fold ^= id;
      }
      ids += BATCH;
      now = nowNs();
    }
    consume(fold);
    return { ids, calls: ids, elapsedNs: now - start };
  };
}

function guardSingleRound(guard: GuardedMinter): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let i = 0; i < BATCH; i++) {
        try {
          fold ^= guard.next();
          ids++;
        } catch (error) {
          // A refusal is what a server turns into UNAVAILABLE; count it and go on (never an ID).
          if (!isFencedError(error)) throw error;
          refusals++;
        }
      }
      now = nowNs();
    }
    consume(fold);
    return { ids, calls: ids, elapsedNs: now - start };
  };
}

function coreClockBlockRound(minter: Minter, clock: ClockSource, size: number): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    let calls = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let attempt = 0; attempt < BATCH; attempt++) {
        const block = minter.mintBlock(clock.nowMs(), size);
        if ('kind' in block) continue;
        fold ^= block.first;
        ids += block.count;
        calls++;
      }
      now = nowNs();
    }
    consume(fold);
    return { ids, calls, elapsedNs: now - start };
  };
}

function guardBlockRound(guard: GuardedMinter, size: number): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    let calls = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let attempt = 0; attempt < BATCH; attempt++) {
        try {
          const blocks = guard.nextBlock(size);
          for (const block of blocks) {
            fold ^= block.first;
            ids += block.count;
          }
          calls++;
        } catch (error) {
          if (!isFencedError(error)) throw error;
          refusals++;
        }
      }
      now = nowNs();
    }
    consume(fold);
    return { ids, calls, elapsedNs: now - start };
  };
}

function main(): void {
  const args = parseBenchArgs(process.argv.slice(2), { rounds: 5, roundMs: 500, check: 4_096_000, seconds: 10 });
  const options = { rounds: args.rounds, roundMs: args.roundMs, warmupRounds: 1 };
  process.stdout.write(
    `bench:clock-guard: ${describeMachine()}\n` +
      `${args.rounds} rounds of ${args.roundMs} ms per case (median reported, after 1 warm-up round); ` +
      `duplicates counted over ${formatCount(args.check)} IDs per path in a separate pass.\n` +
      `Ceiling of one worker: ${formatCount(CEILING)} IDs/s.\n\n`,
  );

  // Single-ID path. Bare and guarded alternate case by case, so a burst of load from elsewhere on this
  // shared machine is less likely to land on one side only.
  const guards: GuardedMinter[] = [];
  const bareReal = runRounds(coreSingleRound(createMinter({ region: REGION, worker: WORKER })), options);
  const guardReal = guardOver(systemClock);
  guards.push(guardReal);
  const guardedReal = runRounds(guardSingleRound(guardReal), options);
  const bareCost = runRounds(
    coreClockSingleRound(createMinter({ region: REGION, worker: WORKER }), neverWaitingClock(PER_MS)),
    options,
  );
  const guardFast = guardOver(neverWaitingClock(PER_MS));
  guards.push(guardFast);
  const guardedCost = runRounds(guardSingleRound(guardFast), options);

  const bareIds = new BigUint64Array(args.check);
  collectCoreSingle(createMinter({ region: REGION, worker: WORKER }), bareIds);
  const bareDuplicates = countDuplicates(bareIds);
  const guardedIds = bareIds; // reuse the memory: the bare pass is counted already
  const guardForCheck = guardOver(systemClock);
  guards.push(guardForCheck);
  for (let i = 0; i < guardedIds.length;) {
    try {
      guardedIds[i] = guardForCheck.next();
      i++;
    } catch (error) {
      if (!isFencedError(error)) throw error;
      refusals++;
    }
  }
  const guardedDuplicates = countDuplicates(guardedIds);

  const overhead = guardedCost.medianNsPerCall / bareCost.medianNsPerCall - 1;
  const busy = (r: RoundsReport): string => formatShare(r.medianNsPerCall * CEILING, 1e9);
  const singleRows = [
    [
      '@idgen/core mintOne(Date.now())',
      formatCount(bareReal.medianIdsPerSecond),
      formatShare(bareReal.medianIdsPerSecond, CEILING),
      formatNanoseconds(bareCost.medianNsPerCall),
      '',
      busy(bareCost),
      `${formatCount(bareDuplicates)} / ${formatCount(args.check)}`,
    ],
    [
      '@idgen/clock-guard next()',
      formatCount(guardedReal.medianIdsPerSecond),
      formatShare(guardedReal.medianIdsPerSecond, CEILING),
      formatNanoseconds(guardedCost.medianNsPerCall),
      `${overhead >= 0 ? '+' : ''}${(overhead * 100).toFixed(1)}%`,
      busy(guardedCost),
      `${formatCount(guardedDuplicates)} / ${formatCount(args.check)}`,
    ],
  ];
  process.stdout.write('Single-ID path (each ID consumed as minted)\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'path' },
        { header: 'IDs/s (real clock)', align: 'right' },
        { header: 'share of ceiling', align: 'right' },
        { header: 'cost per ID*', align: 'right' },
        { header: 'guard overhead*', align: 'right' },
        { header: 'core busy at ceiling*', align: 'right' },
        { header: 'duplicates / checked', align: 'right' },
      ],
      singleRows,
    ),
  );

  // Block path: the server's NextIds(100) and a full millisecond.
  const blockRows: string[][] = [];
  for (const size of [100, 4096]) {
    const bareBlockReal = runRounds(coreBlockRound(createMinter({ region: REGION, worker: WORKER }), size), options);
    const guardBlock = guardOver(systemClock);
    guards.push(guardBlock);
    const guardedBlockReal = runRounds(guardBlockRound(guardBlock, size), options);
    // One read per call: a millisecond holds ⌊4096 / size⌋ calls, so no block is ever cut short.
    const readsPerMs = Math.max(1, Math.floor(PER_MS / size));
    const bareBlockCost = runRounds(
      coreClockBlockRound(createMinter({ region: REGION, worker: WORKER }), neverWaitingClock(readsPerMs), size),
      options,
    );
    const guardBlockFast = guardOver(neverWaitingClock(readsPerMs));
    guards.push(guardBlockFast);
    const guardedBlockCost = runRounds(guardBlockRound(guardBlockFast, size), options);
    const blockOverhead = guardedBlockCost.medianNsPerCall / bareBlockCost.medianNsPerCall - 1;
    blockRows.push(
      [
        `@idgen/core mintBlock(Date.now(), ${size})`,
        formatCount(bareBlockReal.medianIdsPerSecond),
        formatShare(bareBlockReal.medianIdsPerSecond, CEILING),
        formatNanoseconds(bareBlockCost.medianNsPerCall),
        '',
      ],
      [
        `@idgen/clock-guard nextBlock(${size})`,
        formatCount(guardedBlockReal.medianIdsPerSecond),
        formatShare(guardedBlockReal.medianIdsPerSecond, CEILING),
        formatNanoseconds(guardedBlockCost.medianNsPerCall),
        `${blockOverhead >= 0 ? '+' : ''}${(blockOverhead * 100).toFixed(1)}%`,
      ],
    );
  }
  process.stdout.write('\nBlock path (a block is consumed as its first ID and count)\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'path' },
        { header: 'IDs/s (real clock)', align: 'right' },
        { header: 'share of ceiling', align: 'right' },
        { header: 'cost per call*', align: 'right' },
        { header: 'guard overhead*', align: 'right' },
      ],
      blockRows,
    ),
  );
  process.stdout.write(
    '* with a clock that never makes the minter wait (Date.now() plus a skew of 1 ms per full millisecond of\n' +
      '  reads), the real monotonic clock, and an assigned slot with an infinite lease deadline: the cost of\n' +
      '  one call on its own. "core busy at ceiling" = cost per ID × 4,096,000: the share of one core a worker\n' +
      '  spends minting at the ceiling (the rest of each millisecond is the wait for the next one).\n',
  );

  const realShare = guardedReal.medianIdsPerSecond / bareReal.medianIdsPerSecond - 1;
  process.stdout.write(
    `\nTarget: the guard costs ≤ 10%: real clock ${formatShare(guardedReal.medianIdsPerSecond, CEILING)} vs ` +
      `${formatShare(bareReal.medianIdsPerSecond, CEILING)} of the ceiling (${(realShare * 100).toFixed(1)}% IDs/s), ` +
      `${guardedDuplicates} duplicates: ${realShare >= -0.1 && guardedDuplicates === 0 ? 'MET' : 'NOT MET'}; ` +
      `per-call cost +${(overhead * 100).toFixed(1)}% (${formatNanoseconds(guardedCost.medianNsPerCall)} vs ` +
      `${formatNanoseconds(bareCost.medianNsPerCall)})${overhead <= 0.1 ? '' : ': above 10% of the bare call'}\n`,
  );
  process.stdout.write(
    `Guard refusals (FencedError) during the run: ${refusals}` +
      (refusals === 0 ? '\n' : ' (each would be UNAVAILABLE from a server; see README: stalled wall clock)\n'),
  );
  process.stdout.write(`(sink checksum ${sinkChecksum() & 0xffffn}: keeps the JIT from dropping the work)\n`);
  for (const guard of guards) guard.close();
}

main();
