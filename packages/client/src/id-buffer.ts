/** A run of consecutive IDs `first … first + count − 1`, as the server sends them (docs/design.md §1, §6). */
export interface IdBlock {
  readonly first: bigint;
  readonly count: number;
}

interface BufferedBlock {
  next: bigint;
  remaining: number;
  readonly arrivalMs: number;
}

/**
 * The client's local stock of IDs: blocks in arrival order, each handed out in increasing order.
 * An ID is handed out at most once (taking advances the block before returning), and never once
 * `maxAgeMs` has passed since its block arrived (docs/design.md §7: "discards IDs older than 1 s, age measured
 * on the monotonic clock from arrival"). Arrival times only grow, so expired blocks are always at the
 * head: expiry costs nothing per ID.
 */
export class IdBuffer {
  private blocks: BufferedBlock[] = [];
  private head = 0;
  private size = 0;

  constructor(private readonly maxAgeMs: number) {}

  /** IDs held, including any that have expired but not yet been noticed (call {@link expire} first). */
  get available(): number {
    return this.size;
  }

  /** Adds the blocks of one response, all arriving at `arrivalMs`. */
  push(blocks: readonly IdBlock[], arrivalMs: number): void {
    for (const b of blocks) {
      if (b.count <= 0) continue;
      this.blocks.push({ next: b.first, remaining: b.count, arrivalMs });
      this.size += b.count;
    }
  }

  /** Drops the blocks that are `maxAgeMs` old at `nowMs`; returns how many IDs were dropped. */
  expire(nowMs: number): number {
    let dropped = 0;
    const blocks = this.blocks;
    while (this.head < blocks.length) {
      const b = blocks[this.head] as BufferedBlock;
      if (nowMs - b.arrivalMs < this.maxAgeMs) break;
      dropped += b.remaining;
      b.remaining = 0;
      this.head++;
    }
    if (dropped > 0) {
      this.size -= dropped;
      this.compact();
    }
    return dropped;
  }

  /**
   * The next ID, or `undefined` when none is left. Call {@link expire} with the same `nowMs` first:
   * `take` itself does not look at ages (the caller does that once per call, not once per ID).
   */
  take(): bigint | undefined {
    const blocks = this.blocks;
    while (this.head < blocks.length) {
      const b = blocks[this.head] as BufferedBlock;
      if (b.remaining > 0) {
        const id = b.next;
        b.next = id + 1n;
        b.remaining--;
        this.size--;
        if (b.remaining === 0) {
          this.head++;
          this.compact();
        }
        return id;
      }
      this.head++;
    }
    return undefined;
  }

  /** Arrival time of the oldest block still holding IDs (`undefined` when empty). */
  oldestArrivalMs(): number | undefined {
    for (let i = this.head; i < this.blocks.length; i++) {
      const b = this.blocks[i] as BufferedBlock;
      if (b.remaining > 0) return b.arrivalMs;
    }
    return undefined;
  }

  /** Drops everything (on close); returns how many IDs were dropped. */
  clear(): number {
    const dropped = this.size;
    this.blocks = [];
    this.head = 0;
    this.size = 0;
    return dropped;
  }

  private compact(): void {
    // Reclaim the consumed prefix once it dominates, so the array does not grow without bound.
    if (this.head === this.blocks.length) {
      this.blocks = [];
      this.head = 0;
    } else if (this.head > 64 && this.head * 2 > this.blocks.length) {
      this.blocks = this.blocks.slice(this.head);
      this.head = 0;
    }
  }
}
