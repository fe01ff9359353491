import { DEFAULT_LAYOUT, type Layout } from './layout.js';

/**
 * The sequence of the current millisecond is spent: nothing more can be minted until `retryAtMs`.
 * docs/design.md §4: wait for the next millisecond and count the wait.
 */
export interface SequenceExhausted {
  readonly kind: 'sequence-exhausted';
  readonly lastMs: number;
  readonly retryAtMs: number;
}

/**
 * The clock reads earlier than the last millisecond minted in (a rollback of `behindMs`).
 * docs/design.md §4: wait it out when small, self-fence when large. The minter never mints below `lastMs`.
 */
export interface ClockBehind {
  readonly kind: 'clock-behind';
  readonly lastMs: number;
  readonly nowMs: number;
  readonly behindMs: number;
}

/**
 * The clock reads at or below the floor: a millisecond a previous holder of this worker slot may have
 * used (docs/design.md §5). Minting may start at `retryAtMs` (floor + 1).
 */
export interface BelowFloor {
  readonly kind: 'below-floor';
  readonly floorMs: number;
  readonly nowMs: number;
  readonly retryAtMs: number;
}

/** The clock reads before the layout's epoch or after its last millisecond: this clock cannot be used. */
export interface ClockOutOfRange {
  readonly kind: 'clock-out-of-range';
  readonly nowMs: number;
  readonly message: string;
}

/** What the caller must act on when the minter cannot mint now. Never an ID. */
export type MintVerdict = SequenceExhausted | ClockBehind | BelowFloor | ClockOutOfRange;

/** Consecutive IDs `first … first + count − 1`, all minted in Unix millisecond `unixMs`. */
export interface MintedBlock {
  readonly first: bigint;
  readonly count: number;
  readonly unixMs: number;
}

/** Where a minter stands: enough to explain it, not to restore it (a restarted process starts over). */
export interface MinterSnapshot {
  readonly region: number;
  readonly worker: number;
  /** Last Unix millisecond minted in, or -1 before the first mint. */
  readonly lastMs: number;
  /** Last sequence used in `lastMs`, or -1 before the first mint. */
  readonly sequence: number;
  /** No ID is ever minted at or below this Unix millisecond. */
  readonly floorMs: number;
}

/** Who mints: a region code and a worker slot, under a layout. */
export interface MinterOptions {
  readonly layout?: Layout;
  readonly region: number;
  readonly worker: number;
  /** Never mint at or below this Unix millisecond (docs/design.md §5). Default (and lowest): the epoch's millisecond. */
  readonly floorMs?: number;
}

/** True when a mint result is a verdict rather than an ID or a block. */
export function isMintVerdict(result: unknown): result is MintVerdict {
  return typeof result === 'object' && result !== null && 'kind' in result;
}

/**
 * The pure minting state machine of one worker (docs/design.md §4). Time is an argument: the caller reads the
 * clock and passes Unix milliseconds. For every sequence of inputs, every ID it returns is strictly greater
 * than every ID it returned before, so no ID is ever returned twice; when it cannot mint, it returns a
 * {@link MintVerdict} and changes nothing.
 *
 * The single-ID path allocates one `bigint` per ID and nothing else.
 */
export class Minter {
  readonly layout: Layout;
  readonly region: number;
  readonly worker: number;
  private readonly nodeBits: bigint;
  private readonly maxUnixMs: number;
  private floor: number;
  /**
   * The Unix millisecond minted in last; NaN before the first mint, so no input can match it and take the
   * same-millisecond shortcut past the range and floor checks (a `-1` here minted ID 0 for `mintOne(-1)`).
   */
  private last = Number.NaN;
  private sequence = -1;
  /** The ID the next mint in `last` returns. */
  private nextId = 0n;

  constructor(options: MinterOptions) {
    this.layout = options.layout ?? DEFAULT_LAYOUT;
    this.region = this.layout.checkRegion(options.region);
    this.worker = this.layout.checkWorker(options.worker);
    this.nodeBits = this.layout.nodeBits(this.region, this.worker);
    this.maxUnixMs = this.layout.epochMs + this.layout.maxTimestamp;
    // The epoch's own millisecond is never minted in, so 0 is never an ID (region 0, worker 0, sequence 0
    // there): callers may keep 0 as "no ID".
    this.floor = this.layout.epochMs;
    if (options.floorMs !== undefined) this.raiseFloor(options.floorMs);
  }

  /** Last Unix millisecond minted in, or -1 before the first mint. */
  get lastMs(): number {
    return Number.isNaN(this.last) ? -1 : this.last;
  }

  /** No ID is ever minted at or below this Unix millisecond. */
  get floorMs(): number {
    return this.floor;
  }

  /**
   * Raises the floor: no ID will be minted at or below `floorMs`. A floor never goes down; a lower value
   * is ignored, because forgetting a floor is how a previous holder's millisecond gets reused.
   */
  raiseFloor(floorMs: number): void {
    if (!Number.isSafeInteger(floorMs)) {
      throw new RangeError(`floorMs must be a safe integer (Unix milliseconds), got ${String(floorMs)}`);
    }
    if (floorMs > this.floor) this.floor = floorMs;
    // The current millisecond is now at or below the floor: close it, so the same-millisecond fast path
    // cannot go on minting in it.
    if (this.floor >= this.last) this.sequence = this.layout.maxSequence;
  }

  /** Mints one ID at Unix millisecond `nowMs`, or returns why it cannot. */
  mintOne(nowMs: number): bigint | MintVerdict {
    if (nowMs === this.last) {
      if (this.sequence < this.layout.maxSequence) {
        this.sequence++;
        const id = this.nextId;
        this.nextId = id + 1n;
        return id;
      }
      return { kind: 'sequence-exhausted', lastMs: this.last, retryAtMs: this.last + 1 };
    }
    const refused = this.refuseNewMs(nowMs);
    if (refused !== undefined) return refused;
    const id = (BigInt(nowMs - this.layout.epochMs) << this.layout.timestampShiftBig) | this.nodeBits;
    this.last = nowMs;
    this.sequence = 0;
    this.nextId = id + 1n;
    return id;
  }

  /**
   * Mints up to `count` consecutive IDs in Unix millisecond `nowMs`: as many as the millisecond has left.
   * A request that does not fit continues with the next call (in a later millisecond: docs/design.md §4).
   * `count` must be an integer from 1 to the sequence size (4,096 by default).
   */
  mintBlock(nowMs: number, count: number): MintedBlock | MintVerdict {
    const perMs = this.layout.maxSequence + 1;
    if (!Number.isInteger(count) || count < 1 || count > perMs) {
      throw new RangeError(`count must be an integer from 1 to ${perMs}, got ${String(count)}`);
    }
    if (nowMs === this.last) {
      const left = this.layout.maxSequence - this.sequence;
      if (left === 0) return { kind: 'sequence-exhausted', lastMs: this.last, retryAtMs: this.last + 1 };
      const n = count < left ? count : left;
      const first = this.nextId;
      this.sequence += n;
      this.nextId = first + BigInt(n);
      return { first, count: n, unixMs: nowMs };
    }
    const refused = this.refuseNewMs(nowMs);
    if (refused !== undefined) return refused;
    const first = (BigInt(nowMs - this.layout.epochMs) << this.layout.timestampShiftBig) | this.nodeBits;
    const n = count < perMs ? count : perMs;
    this.last = nowMs;
    this.sequence = n - 1;
    this.nextId = first + BigInt(n);
    return { first, count: n, unixMs: nowMs };
  }

  /** Where this minter stands. */
  snapshot(): MinterSnapshot {
    return {
      region: this.region,
      worker: this.worker,
      lastMs: this.lastMs,
      sequence: this.sequence,
      floorMs: this.floor,
    };
  }

  /** Why `nowMs`, a millisecond other than the last one, cannot start a new millisecond; undefined if it can. */
  private refuseNewMs(nowMs: number): MintVerdict | undefined {
    if (!Number.isInteger(nowMs)) {
      throw new RangeError(`nowMs must be an integer (Unix milliseconds), got ${String(nowMs)}`);
    }
    if (nowMs < this.last) {
      return { kind: 'clock-behind', lastMs: this.last, nowMs, behindMs: this.last - nowMs };
    }
    if (nowMs < this.layout.epochMs || nowMs > this.maxUnixMs) {
      return {
        kind: 'clock-out-of-range',
        nowMs,
        message:
          `the clock reads ${nowMs} (Unix ms), outside this layout's lifetime ` +
          `${this.layout.epochMs} … ${this.maxUnixMs}`,
      };
    }
    if (nowMs <= this.floor) {
      return { kind: 'below-floor', floorMs: this.floor, nowMs, retryAtMs: this.floor + 1 };
    }
    return undefined;
  }
}

/** Creates the minting state machine of one worker. */
export function createMinter(options: MinterOptions): Minter {
  return new Minter(options);
}
