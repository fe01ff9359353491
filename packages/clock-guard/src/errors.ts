/**
 * Why a guard refuses to mint. Every reason is retryable on another node (docs/design.md §6: UNAVAILABLE).
 * - `not-assigned`: no worker slot yet (booting, or between leases);
 * - `waiting-for-floor`: a slot is held but the clock has not passed the previous holder's last millisecond;
 * - `clock-rollback`: the wall clock went back by more than the tolerated rollback (docs/design.md §4);
 * - `clock-out-of-range`: the wall clock is before the layout's epoch or past its end;
 * - `lease`: the fence deadline passed without an acknowledged keep-alive, or the lease is gone (docs/design.md §5);
 * - `clock-ahead`: the wall clock is above the lease's wall ceiling (last acknowledged `last-ms` + TTL − margin,
 *   docs/design.md §5): minting there could reach the millisecond the slot's next holder starts at;
 * - `time-source`: chrony says the clock is not synchronised or too far off (docs/design.md §4);
 * - `draining`: the node is shutting down.
 */
export type FenceReason =
  | 'not-assigned'
  | 'waiting-for-floor'
  | 'clock-rollback'
  | 'clock-out-of-range'
  | 'lease'
  | 'clock-ahead'
  | 'time-source'
  | 'draining';

/** Every {@link FenceReason}, for metrics and tests. */
export const FENCE_REASONS: readonly FenceReason[] = [
  'not-assigned',
  'waiting-for-floor',
  'clock-rollback',
  'clock-out-of-range',
  'lease',
  'clock-ahead',
  'time-source',
  'draining',
];

const BRAND = Symbol.for('@idgen/clock-guard/FencedError');

/**
 * The guard refused to mint: nothing was minted. Retryable on another node (a server maps it to
 * UNAVAILABLE). Check with {@link isFencedError}, not `instanceof`.
 */
export class FencedError extends Error {
  override readonly name = 'FencedError';
  readonly code = 'fenced';
  readonly retryable = true;
  readonly [BRAND] = true;

  constructor(
    readonly reason: FenceReason,
    message: string,
    /** Monotonic ms when this fence began. */
    readonly sinceMonoMs: number,
  ) {
    super(message);
  }

  /** Wraps anything thrown while minting: a FencedError stays as it is. */
  static from(e: unknown): FencedError | undefined {
    return isFencedError(e) ? e : undefined;
  }
}

/** True when `e` is a {@link FencedError} from any copy of this package. */
export function isFencedError(e: unknown): e is FencedError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[BRAND] === true;
}
