/** What went wrong with a client call (the closed family of {@link IdClientError} codes). */
export type IdClientErrorCode = 'ids-unavailable' | 'rejected' | 'closed';

const CLIENT_BRAND = Symbol.for('@idgen/client/IdClientError');
const UNAVAILABLE_BRAND = Symbol.for('@idgen/client/IdsUnavailableError');

/** One failed attempt on one node, as reported in {@link IdsUnavailableError.attempts}. */
export interface AttemptFailure {
  /** The node's base URL. */
  readonly node: string;
  /** The region the node serves. */
  readonly region: number;
  /**
   * Connect code name (`unavailable`, `deadline_exceeded`, `internal` for a broken response, …), or a refusal
   * of the client's block checks: `foreign_region` (IDs of a region neither home nor fallback) or
   * `replayed_block` (a block not above the last one taken from its worker).
   */
  readonly code: string;
  readonly message: string;
  /** Monotonic milliseconds (client clock) when the attempt failed. */
  readonly atMonoMs: number;
}

/**
 * Base of the client's errors. `code` says what happened; `retryable` whether calling again later may
 * succeed. Use {@link isIdClientError} rather than `instanceof` (two copies of the package may be loaded).
 */
export class IdClientError extends Error {
  override readonly name: string = 'IdClientError';
  readonly [CLIENT_BRAND] = true;

  constructor(
    readonly code: IdClientErrorCode,
    message: string,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** Wraps any thrown value: returns it unchanged when it already is an {@link IdClientError}. */
  static from(e: unknown): IdClientError {
    if (isIdClientError(e)) return e;
    const message = e instanceof Error ? e.message : String(e);
    return new IdClientError('rejected', message, false, { cause: e });
  }
}

/**
 * No ID could be obtained before the call's deadline: the buffer was spent and every node of the home
 * region and of every fallback region failed or was backing off. The client never invents an ID
 * (docs/design.md: "a missing ID is an outage; a duplicate ID is corruption"): the caller decides what to do,
 * typically retry later or fail its own request. Retryable: nodes may come back.
 */
export class IdsUnavailableError extends IdClientError {
  override readonly name = 'IdsUnavailableError';
  readonly [UNAVAILABLE_BRAND] = true;

  constructor(
    message: string,
    /** The most recent failed attempts (newest last), to say which nodes failed and how. */
    readonly attempts: readonly AttemptFailure[],
    /** How long the call waited, in milliseconds. */
    readonly waitedMs: number,
  ) {
    super('ids-unavailable', message, true);
  }
}

/** True when `e` is an {@link IdClientError} (any code) from any copy of this package. */
export function isIdClientError(e: unknown): e is IdClientError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[CLIENT_BRAND] === true;
}

/** True when `e` is an {@link IdsUnavailableError} from any copy of this package. */
export function isIdsUnavailableError(e: unknown): e is IdsUnavailableError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[UNAVAILABLE_BRAND] === true;
}
