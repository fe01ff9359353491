/**
 * What every ID source shares with its callers: `@idgen/client` (IDs from the region's nodes) and `@idgen/embedded`
 * (IDs minted in the caller's process) implement it, so a caller that switches between them by configuration keeps
 * its call options and its error handling. Declared once here, as an API package is beside its implementations.
 */

/** Largest `nextIds` count: bigger batches are a loop of calls away, and hold a source's buffer less long. */
export const MAX_NEXT_IDS = 65_536;

/** Options of one call to an ID source. */
export interface CallOptions {
  /** Abandons the call: it rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
  /** This call's deadline in milliseconds (default: the source's own `deadlineMs`). */
  readonly deadlineMs?: number;
}

/** What went wrong with a call (the closed family of {@link IdClientError} codes). */
export type IdClientErrorCode = 'ids-unavailable' | 'rejected' | 'closed';

const CLIENT_BRAND = Symbol.for('@idgen/client/IdClientError');
const UNAVAILABLE_BRAND = Symbol.for('@idgen/client/IdsUnavailableError');

/** One failed attempt on one node, as reported in {@link IdsUnavailableError.attempts} (none in-process). */
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
 * Base of an ID source's errors. `code` says what happened; `retryable` whether calling again later may succeed.
 * Use {@link isIdClientError} rather than `instanceof` (two copies of a package may be loaded). The brands keep
 * the names of the client's first release, so errors from every version and source are recognised.
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

/** What an {@link IdsUnavailableError} says besides its message. */
export interface UnavailableDetails<Reason extends string = string> {
  /** How long the call waited, in milliseconds (0 for a call that does not wait). */
  readonly waitedMs: number;
  /** The most recent failed attempts on nodes (newest last); none for an in-process source. */
  readonly attempts?: readonly AttemptFailure[];
  /** Why an in-process source has no ID (a fence reason, say); none for the client. */
  readonly reason?: Reason;
  readonly cause?: unknown;
  /** Default true: the nodes, or the lease, may come back. */
  readonly retryable?: boolean;
}

/**
 * No ID could be had before the call's deadline: every node failed, or the in-process source is fenced or not
 * assigned a slot. A source never invents an ID (docs/design.md: "a missing ID is an outage; a duplicate ID is
 * corruption"): the caller decides what to do, typically retry later or fail its own request.
 */
export class IdsUnavailableError<Reason extends string = string> extends IdClientError {
  override readonly name: string = 'IdsUnavailableError';
  readonly [UNAVAILABLE_BRAND] = true;
  /** The most recent failed attempts (newest last), to say which nodes failed and how; empty in-process. */
  readonly attempts: readonly AttemptFailure[];
  /** Why there is no ID, from an in-process source; undefined from the client. */
  readonly reason: Reason | undefined;
  /** How long the call waited, in milliseconds. */
  readonly waitedMs: number;

  constructor(message: string, details: UnavailableDetails<Reason>) {
    super(
      'ids-unavailable',
      message,
      details.retryable ?? true,
      details.cause === undefined ? undefined : { cause: details.cause },
    );
    this.attempts = details.attempts ?? [];
    this.reason = details.reason;
    this.waitedMs = details.waitedMs;
  }
}

/** True when `e` is an {@link IdClientError} (any code), from any ID source and any copy of its package. */
export function isIdClientError(e: unknown): e is IdClientError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[CLIENT_BRAND] === true;
}

/** True when `e` is an {@link IdsUnavailableError}, from any ID source and any copy of its package. */
export function isIdsUnavailableError(e: unknown): e is IdsUnavailableError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[UNAVAILABLE_BRAND] === true;
}
