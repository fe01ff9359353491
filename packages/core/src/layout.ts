/**
 * The ID layout: how a 64-bit ID is cut into fields (docs/design.md §1).
 *
 * ```
 *  bit 63 | 62 ............ 22 | 21 .. 19 | 18 ..... 12 | 11 ....... 0
 *    0    | timestamp (41 bits) | region(3) | worker (7)  | sequence (12)
 * ```
 *
 * - sign: always 0, so an ID is a positive signed 64-bit integer in every language;
 * - timestamp: milliseconds since the epoch (default 2024-01-01T00:00:00.000Z);
 * - region: one of 8 codes; worker: one of 128 slots per region; sequence: 4,096 IDs per millisecond.
 *
 * The widths above are the defaults. A custom layout may move the boundaries, but the four widths must
 * total 63 bits. Every value outside its field's range throws a `RangeError` that names the range:
 * nothing is ever masked into range (masking is how duplicates are born).
 *
 * @packageDocumentation
 */

/** 2024-01-01T00:00:00.000Z in Unix milliseconds: the default epoch. */
export const DEFAULT_EPOCH_MS = 1_704_067_200_000;
/** Default width of the timestamp field (lasts until 2093-09-06 with the default epoch). */
export const DEFAULT_TIMESTAMP_BITS = 41;
/** Default width of the region field: 8 codes. */
export const DEFAULT_REGION_BITS = 3;
/** Default width of the worker field: 128 slots per region. */
export const DEFAULT_WORKER_BITS = 7;
/** Default width of the sequence field: 4,096 IDs per millisecond per worker. */
export const DEFAULT_SEQUENCE_BITS = 12;
/** The bits an ID may use: 64 less the sign bit. */
export const ID_BITS = 63;
/** The largest ID of any layout: 2^63 − 1. */
export const MAX_ID = (1n << 63n) - 1n;

/** Largest Unix millisecond a JavaScript `Date` can hold (±8.64e15). */
const MAX_DATE_MS = 8_640_000_000_000_000;

/** Field widths and epoch of a layout, as written in etcd's `{prefix}/layout` record. */
export interface LayoutOptions {
  /** Unix milliseconds of timestamp 0. Default {@link DEFAULT_EPOCH_MS}. */
  readonly epochMs?: number;
  readonly timestampBits?: number;
  readonly regionBits?: number;
  readonly workerBits?: number;
  readonly sequenceBits?: number;
}

/** The fields of one ID. `timestampMs` counts milliseconds since the layout's epoch, not since 1970. */
export interface IdFields {
  readonly timestampMs: number;
  readonly region: number;
  readonly worker: number;
  readonly sequence: number;
}

/** A layout in the plain form stored in etcd and printed by `GetStatus`. */
export interface LayoutRecord {
  readonly epochMs: number;
  readonly timestampBits: number;
  readonly regionBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
}

function checkInteger(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer from ${min} to ${max}, got ${describe(value)}`);
  }
  return value;
}

function describe(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value);
  return String(value);
}

/**
 * A validated layout. Create one with {@link createLayout}; {@link DEFAULT_LAYOUT} is docs/design.md §1's.
 * All methods check their inputs and throw `RangeError` naming the valid range.
 */
export class Layout implements LayoutRecord {
  readonly epochMs: number;
  readonly timestampBits: number;
  readonly regionBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;

  /** Largest value of each field. */
  readonly maxTimestamp: number;
  readonly maxRegion: number;
  readonly maxWorker: number;
  readonly maxSequence: number;

  /** Bit offsets of each field (the sequence starts at bit 0). */
  readonly workerShift: number;
  readonly regionShift: number;
  readonly timestampShift: number;

  /** The same offsets as `bigint`, for composing without conversions on the hot path. */
  readonly workerShiftBig: bigint;
  readonly regionShiftBig: bigint;
  readonly timestampShiftBig: bigint;

  private readonly sequenceMaskBig: bigint;
  private readonly workerMaskBig: bigint;
  private readonly regionMaskBig: bigint;

  /** @internal use {@link createLayout} */
  constructor(options: LayoutOptions = {}) {
    const epochMs = options.epochMs ?? DEFAULT_EPOCH_MS;
    this.timestampBits = checkInteger('timestampBits', options.timestampBits ?? DEFAULT_TIMESTAMP_BITS, 1, 52);
    this.regionBits = checkInteger('regionBits', options.regionBits ?? DEFAULT_REGION_BITS, 0, 62);
    this.workerBits = checkInteger('workerBits', options.workerBits ?? DEFAULT_WORKER_BITS, 0, 62);
    this.sequenceBits = checkInteger('sequenceBits', options.sequenceBits ?? DEFAULT_SEQUENCE_BITS, 1, 30);
    const total = this.timestampBits + this.regionBits + this.workerBits + this.sequenceBits;
    if (total !== ID_BITS) {
      throw new RangeError(
        `layout bits must total ${ID_BITS} (timestamp ${this.timestampBits} + region ${this.regionBits} + ` +
          `worker ${this.workerBits} + sequence ${this.sequenceBits} = ${total})`,
      );
    }
    this.maxTimestamp = 2 ** this.timestampBits - 1;
    this.epochMs = checkInteger('epochMs', epochMs, 0, MAX_DATE_MS - this.maxTimestamp);
    this.maxRegion = 2 ** this.regionBits - 1;
    this.maxWorker = 2 ** this.workerBits - 1;
    this.maxSequence = 2 ** this.sequenceBits - 1;
    this.workerShift = this.sequenceBits;
    this.regionShift = this.sequenceBits + this.workerBits;
    this.timestampShift = this.regionShift + this.regionBits;
    this.workerShiftBig = BigInt(this.workerShift);
    this.regionShiftBig = BigInt(this.regionShift);
    this.timestampShiftBig = BigInt(this.timestampShift);
    this.sequenceMaskBig = BigInt(this.maxSequence);
    this.workerMaskBig = BigInt(this.maxWorker);
    this.regionMaskBig = BigInt(this.maxRegion);
    Object.freeze(this);
  }

  /** Checks a region code; returns it. */
  checkRegion(region: number): number {
    return checkInteger('region', region, 0, this.maxRegion);
  }

  /** Checks a worker slot; returns it. */
  checkWorker(worker: number): number {
    return checkInteger('worker', worker, 0, this.maxWorker);
  }

  /** Checks a sequence number; returns it. */
  checkSequence(sequence: number): number {
    return checkInteger('sequence', sequence, 0, this.maxSequence);
  }

  /** Checks a timestamp field value (milliseconds since the epoch); returns it. */
  checkTimestamp(timestampMs: number): number {
    return checkInteger('timestampMs', timestampMs, 0, this.maxTimestamp);
  }

  /** Checks an ID (0 … 2^63 − 1); returns it. */
  checkId(id: bigint): bigint {
    if (typeof id !== 'bigint' || id < 0n || id > MAX_ID) {
      throw new RangeError(`an ID must be a bigint from 0 to ${MAX_ID}, got ${describe(id)}`);
    }
    return id;
  }

  /** The region and worker bits of a node, ORed into every ID it mints. */
  nodeBits(region: number, worker: number): bigint {
    return (
      (BigInt(this.checkRegion(region)) << this.regionShiftBig) |
      (BigInt(this.checkWorker(worker)) << this.workerShiftBig)
    );
  }

  /** Builds an ID from its fields; throws `RangeError` for any field out of range. */
  compose(fields: IdFields): bigint {
    return (
      (BigInt(this.checkTimestamp(fields.timestampMs)) << this.timestampShiftBig) |
      this.nodeBits(fields.region, fields.worker) |
      BigInt(this.checkSequence(fields.sequence))
    );
  }

  /** Splits an ID into its fields. */
  decompose(id: bigint): IdFields {
    this.checkId(id);
    return {
      timestampMs: Number(id >> this.timestampShiftBig),
      region: Number((id >> this.regionShiftBig) & this.regionMaskBig),
      worker: Number((id >> this.workerShiftBig) & this.workerMaskBig),
      sequence: Number(id & this.sequenceMaskBig),
    };
  }

  /** Unix milliseconds at which an ID was minted. */
  unixMsOf(id: bigint): number {
    return Number(this.checkId(id) >> this.timestampShiftBig) + this.epochMs;
  }

  /** The moment an ID was minted, as a `Date`. */
  dateOf(id: bigint): Date {
    return new Date(this.unixMsOf(id));
  }

  /** Converts Unix milliseconds to this layout's timestamp field; throws outside the layout's lifetime. */
  timestampOf(unixMs: number): number {
    const min = this.epochMs;
    const max = this.epochMs + this.maxTimestamp;
    if (typeof unixMs !== 'number' || !Number.isInteger(unixMs) || unixMs < min || unixMs > max) {
      throw new RangeError(
        `Unix milliseconds must be an integer from ${min} (${new Date(min).toISOString()}) to ${max} ` +
          `(${new Date(max).toISOString()}), got ${describe(unixMs)}`,
      );
    }
    return unixMs - this.epochMs;
  }

  /** The smallest ID any node can mint in a Unix millisecond: the lower bound of a range query by time. */
  firstIdOf(unixMs: number): bigint {
    return BigInt(this.timestampOf(unixMs)) << this.timestampShiftBig;
  }

  /** The largest ID any node can mint in a Unix millisecond: the upper bound of a range query by time. */
  lastIdOf(unixMs: number): bigint {
    return this.firstIdOf(unixMs) | ((1n << this.timestampShiftBig) - 1n);
  }

  /** This layout as the plain record stored in etcd. */
  toRecord(): LayoutRecord {
    return {
      epochMs: this.epochMs,
      timestampBits: this.timestampBits,
      regionBits: this.regionBits,
      workerBits: this.workerBits,
      sequenceBits: this.sequenceBits,
    };
  }

  /**
   * The fields in which `other` differs from this layout, as human-readable lines
   * (`epochMs: 1704067200000 here, 0 in etcd`); empty when they are the same layout.
   */
  differences(other: LayoutRecord, hereName = 'here', thereName = 'there'): string[] {
    const mine = this.toRecord();
    const out: string[] = [];
    for (const key of Object.keys(mine) as (keyof LayoutRecord)[]) {
      if (mine[key] !== other[key]) {
        out.push(`${key}: ${mine[key]} ${hereName}, ${describe(other[key])} ${thereName}`);
      }
    }
    return out;
  }
}

/**
 * Creates a validated layout. Bits must total 63; the epoch must be a non-negative integer such that the
 * layout's last millisecond is still a valid `Date`. Throws `RangeError` naming the rule that failed.
 */
export function createLayout(options: LayoutOptions = {}): Layout {
  return new Layout(options);
}

/** docs/design.md §1's layout: epoch 2024-01-01T00:00:00.000Z, 41/3/7/12 bits. */
export const DEFAULT_LAYOUT: Layout = createLayout();
