import type { Layout } from '@idgen/core';
import type { IdBlock } from './id-buffer.js';

/** Why a block was refused (the `idgen.refusal` attribute of `idgen.client.blocks.refused`). */
export type BlockRefusalReason = 'foreign-region' | 'replayed';

/** A response the client refused: which block, why, and a message naming the node and region. */
export interface BlockRefusal {
  readonly reason: BlockRefusalReason;
  /** Region code the refused block's IDs carry. */
  readonly region: number;
  readonly worker: number;
  /** Blocks of the response that broke the rule (the whole response is refused). */
  readonly blocks: number;
  readonly message: string;
}

/**
 * The client's checks on what a node sends, per block and never per ID (a check per ID
 * would cost every buffered `nextId()`):
 *
 * - region: every block's IDs carry the home region or a configured fallback region. A node serving
 *   another region (a wrong `--region`, a mis-pointed address) would hand out IDs the caller did not ask
 *   for and that nothing else in its set-up accounts for: "a node on the wrong region must not go unnoticed".
 * - replay: within one (region, worker) slot IDs only grow (the lease's floor, docs/design.md §4), so a block
 *   whose first ID is not above the last ID already taken from that slot is a replayed or repeated answer
 *   (a proxy repeating a response, a node restored from an old state): handing it out would be a duplicate.
 *
 * The last ID per slot is kept for at most 2^(region bits + worker bits) slots (1,024 with the default layout).
 */
export class BlockGuard {
  private readonly lastBySlot = new Map<number, bigint>();
  private readonly slotShift: bigint;
  private readonly slotMask: bigint;
  private readonly workerSpan: number;

  constructor(
    private readonly layout: Layout,
    private readonly regions: ReadonlySet<number>,
    private readonly home: number,
  ) {
    this.slotShift = layout.workerShiftBig;
    this.slotMask = (1n << BigInt(layout.regionBits + layout.workerBits)) - 1n;
    this.workerSpan = layout.maxWorker + 1;
  }

  /**
   * Checks one response (blocks already known increasing and in range). Returns the refusal, or `undefined`
   * when every block passes; nothing is remembered until {@link accept}.
   */
  check(blocks: readonly IdBlock[], nodeUrl: string): BlockRefusal | undefined {
    let refusal: BlockRefusal | undefined;
    let count = 0;
    for (const b of blocks) {
      const slot = Number((b.first >> this.slotShift) & this.slotMask);
      const last = b.first + BigInt(b.count - 1);
      const region = Math.floor(slot / this.workerSpan);
      const worker = slot % this.workerSpan;
      if (Number((last >> this.slotShift) & this.slotMask) !== slot || !this.regions.has(region)) {
        // A block that spills into another slot also carries IDs of a slot the node does not hold.
        count++;
        refusal ??= {
          reason: 'foreign-region',
          region,
          worker,
          blocks: 0,
          message:
            `${nodeUrl} served IDs of region ${region} (worker ${worker}), which is neither the home region ` +
            `${this.home} nor a configured fallback region (${this.describeFallbacks()}): refused`,
        };
        continue;
      }
      const previous = this.lastBySlot.get(slot);
      if (previous !== undefined && b.first <= previous) {
        count++;
        refusal ??= {
          reason: 'replayed',
          region,
          worker,
          blocks: 0,
          message:
            `${nodeUrl} served block ${b.first}+${b.count} of region ${region} worker ${worker}, not above ` +
            `${previous}, the last ID already taken from that worker (a replayed or repeated answer): refused`,
        };
      }
    }
    return refusal === undefined ? undefined : { ...refusal, blocks: count };
  }

  /** Remembers the last ID of each slot of an accepted response. */
  accept(blocks: readonly IdBlock[]): void {
    for (const b of blocks) {
      const slot = Number((b.first >> this.slotShift) & this.slotMask);
      this.lastBySlot.set(slot, b.first + BigInt(b.count - 1));
    }
  }

  private describeFallbacks(): string {
    const others = [...this.regions].filter((r) => r !== this.home);
    return others.length === 0 ? 'none configured' : others.join(', ');
  }
}
