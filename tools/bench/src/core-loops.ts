import type { Minter } from '@idgen/core';
import type { Round } from './rounds.js';
import { nowNs } from './rounds.js';

/**
 * Throughput loops over the core's minter, shared by `bench:core` and `bench:clock-guard`. Each loop
 * consumes every ID as it is minted by XOR-folding it into a sink (storing millions of IDs would measure
 * the garbage collector, not the minter), and checks the time once per 4,096 IDs so the clock read that
 * ends the round does not weigh on each ID (block loops: once per 4,096 calls).
 *
 * Each loop is its own function literal on purpose: one generic loop calling a different minter each time
 * would turn megamorphic and measure V8's inline caches instead of the minters.
 */

/** IDs (single-ID loops) or calls (block loops) between two reads of the round's timer. */
export const BATCH = 4096;

let sink = 0n;

/** Folds a loop's result into the module sink, so the JIT cannot drop the work that produced it. */
export function consume(value: bigint): void {
  sink ^= value;
}

/** The XOR of everything consumed so far; benchmarks print it so the sink is observably used. */
export function sinkChecksum(): bigint {
  return sink;
}

/**
 * The core's single-ID path driven by `Date.now()`: `mintOne(Date.now())`, retrying on a verdict (the
 * sequence of this millisecond is spent: the next read of the clock is the wait, docs/design.md §4).
 */
export function coreSingleRound(minter: Minter): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let i = 0; i < BATCH; i++) {
        let id = minter.mintOne(Date.now());
        while (typeof id !== 'bigint') id = minter.mintOne(Date.now());
        fold ^= id;
      }
      ids += BATCH;
      now = nowNs();
    }
    consume(fold);
    return { ids, calls: ids, elapsedNs: now - start };
  };
}

/** The core's block path driven by `Date.now()`: `mintBlock(Date.now(), size)`, retrying on a verdict. */
export function coreBlockRound(minter: Minter, size: number): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    let calls = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      // Batch by attempts, not IDs: a batch of 4,096 IDs is a single call for a block of 4,096.
      for (let attempt = 0; attempt < BATCH; attempt++) {
        const block = minter.mintBlock(Date.now(), size);
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

/**
 * How the never-waiting clock of the compute loops moves: `same-ms` adds one millisecond of skew to
 * `Date.now()` only when the sequence is spent (most calls take the same-millisecond path, as they do at
 * full load); `new-ms` adds one on every call, so every call starts a new millisecond (the path a block
 * that fills its millisecond always takes). Either way the clock is still read on every call.
 */
export type ComputeClock = 'same-ms' | 'new-ms';

/**
 * The block path with a clock that never makes it wait (see {@link ComputeClock}): the cost of one call
 * with nothing held back by the 4,096-per-millisecond ceiling, which is how the cost per block can be
 * compared across block sizes. Its IDs carry future timestamps, which only a benchmark may do.
 */
export function coreBlockComputeRound(minter: Minter, size: number, clock: ComputeClock): Round {
  const step = clock === 'new-ms' ? 1 : 0;
  // The skew outlives each round: the minter remembers the last millisecond, and a clock that fell
  // back to plain Date.now() would measure a long rollback instead of minting.
  let skew = 0;
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    let calls = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let attempt = 0; attempt < BATCH; attempt++) {
        const block = minter.mintBlock(Date.now() + skew, size);
        skew += step;
        if ('kind' in block) {
          skew++;
          continue;
        }
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

/** The single-ID path with the never-waiting clock of {@link coreBlockComputeRound}: compute cost only. */
export function coreSingleComputeRound(minter: Minter, clock: ComputeClock): Round {
  const step = clock === 'new-ms' ? 1 : 0;
  // The skew outlives each round: the minter remembers the last millisecond, and a clock that fell
  // back to plain Date.now() would measure a long rollback instead of minting.
  let skew = 0;
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let i = 0; i < BATCH; i++) {
        let id = minter.mintOne(Date.now() + skew);
        skew += step;
        while (typeof id !== 'bigint') {
          skew++;
          id = minter.mintOne(Date.now() + skew);
        }
        fold ^= id;
      }
      ids += BATCH;
      now = nowNs();
    }
    consume(fold);
    return { ids, calls: ids, elapsedNs: now - start };
  };
}

/** Mints `out.length` IDs through the single-ID path into `out`, for the duplicate pass. */
export function collectCoreSingle(minter: Minter, out: BigUint64Array): void {
  for (let i = 0; i < out.length; i++) {
    let id = minter.mintOne(Date.now());
    while (typeof id !== 'bigint') id = minter.mintOne(Date.now());
    out[i] = id;
  }
}

/** Mints `out.length` IDs through the block path into `out` (every ID of every block), for the duplicate pass. */
export function collectCoreBlocks(minter: Minter, size: number, out: BigUint64Array): void {
  let filled = 0;
  while (filled < out.length) {
    const block = minter.mintBlock(Date.now(), size);
    if ('kind' in block) continue;
    for (let k = 0; k < block.count && filled < out.length; k++) out[filled++] = block.first + BigInt(k);
  }
}
