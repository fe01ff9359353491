import type { FenceReason } from '@idgen/clock-guard';

/**
 * The error family of `@idgen/client`, declared again here so that an embedded caller installs neither Connect
 * nor the protobuf runtime for one class (docs/design.md §7). The classes carry the client's brands
 * (`Symbol.for('@idgen/client/…')`), so `isIdClientError` and `isIdsUnavailableError` from either package
 * recognise the errors of both: a caller that switches between the client and the embedded source by
 * configuration keeps its error handling.
 */
export type IdClientErrorCode = 'ids-unavailable' | 'rejected' | 'closed';

const CLIENT_BRAND = Symbol.for('@idgen/client/IdClientError');
const UNAVAILABLE_BRAND = Symbol.for('@idgen/client/IdsUnavailableError');

/** One failed attempt on one node, the client's shape; an embedded source makes no network attempts. */
export interface AttemptFailure {
  readonly node: string;
  readonly region: number;
  readonly code: string;
  readonly message: string;
  readonly atMonoMs: number;
}

/**
 * Why an embedded source has no ID to give:
 * - a guard's fence reason (`not-assigned`, `waiting-for-floor`, `lease`, `clock-ahead`, `clock-rollback`,
 *   `time-source`, `clock-out-of-range`, `draining`; see `@idgen/clock-guard`);
 * - `range-full`: every slot of the configured range was held for the whole `slotWaitMs`;
 * - `start-failed`: the start stopped for good (a layout mismatch, etcd refusing the credentials or the role).
 */
export type UnavailableReason = FenceReason | 'range-full' | 'start-failed';

/**
 * Base of the errors: `code` says what happened, `retryable` whether calling again later may succeed. Use
 * {@link isIdClientError} rather than `instanceof` (two copies of a package may be loaded, and the client's
 * errors are the same family).
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
}

/**
 * No ID now: the source is fenced, not assigned a slot yet, or could not start. Never an invented ID
 * (docs/design.md: "a missing ID is an outage; a duplicate ID is corruption"). The synchronous calls throw it at
 * once; the asynchronous ones after waiting up to their deadline for the fence to lift.
 */
export class IdsUnavailableError extends IdClientError {
  override readonly name = 'IdsUnavailableError';
  readonly [UNAVAILABLE_BRAND] = true;
  /** Always empty in-process (the client's field, kept so code written for the client reads it safely). */
  readonly attempts: readonly AttemptFailure[] = [];

  constructor(
    message: string,
    /** Why there is no ID. */
    readonly reason: UnavailableReason,
    /** How long the call waited, in milliseconds (0 for the synchronous calls). */
    readonly waitedMs: number,
    options?: { cause?: unknown; retryable?: boolean },
  ) {
    super(
      'ids-unavailable',
      message,
      options?.retryable ?? true,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
  }
}

/** Every slot of the source's range stayed held for `slotWaitMs`: which range, and how many held it. */
export class RangeFullError extends IdsUnavailableError {
  constructor(
    message: string,
    /** The region whose range was full. */
    readonly region: number,
    /** The range, inclusive. */
    readonly range: { readonly first: number; readonly last: number },
    /** How many slots held the range at the last attempt. */
    readonly holders: number,
    waitedMs: number,
    cause: unknown,
  ) {
    super(message, 'range-full', waitedMs, { cause });
  }
}

/** True when `e` is an {@link IdClientError} (any code), from this package or `@idgen/client`. */
export function isIdClientError(e: unknown): e is IdClientError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[CLIENT_BRAND] === true;
}

/** True when `e` is an {@link IdsUnavailableError}, from this package or `@idgen/client`. */
export function isIdsUnavailableError(e: unknown): e is IdsUnavailableError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[UNAVAILABLE_BRAND] === true;
}

/** The error every call gets after `close()`. */
export function closedError(): IdClientError {
  return new IdClientError('closed', 'the embedded ID source is closed', false);
}
