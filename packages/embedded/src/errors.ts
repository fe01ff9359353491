import { IdClientError, IdsUnavailableError, isIdsUnavailableError as isAnyIdsUnavailableError } from '@idgen/core';
import type { FenceReason } from '@idgen/clock-guard';

// The error family is the contract every ID source shares (`@idgen/core`'s id-source.ts): the client throws the
// same classes, so a caller that switches between the two by configuration keeps its error handling.
export { IdClientError, IdsUnavailableError, isIdClientError } from '@idgen/core';
export type { AttemptFailure, IdClientErrorCode } from '@idgen/core';

/**
 * Why an embedded source has no ID to give:
 * - a guard's fence reason (`not-assigned`, `waiting-for-floor`, `lease`, `clock-ahead`, `clock-rollback`,
 *   `time-source`, `clock-out-of-range`, `draining`; see `@idgen/clock-guard`);
 * - `range-full`: every slot of the configured range was held for the whole `slotWaitMs`;
 * - `start-failed`: the start stopped for good (a layout mismatch, etcd refusing the credentials or the role).
 */
export type UnavailableReason = FenceReason | 'range-full' | 'start-failed';

/** Every slot of the source's range stayed held for `slotWaitMs`: which range, and how many held it. */
export class RangeFullError extends IdsUnavailableError<UnavailableReason> {
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
    super(message, { reason: 'range-full', waitedMs, cause });
  }
}

/** The error every call gets after `close()`. */
export function closedError(): IdClientError {
  return new IdClientError('closed', 'the embedded ID source is closed', false);
}

/**
 * True when `e` is an {@link IdsUnavailableError}, from any ID source and any copy of its package (core's guard), with
 * `reason` typed as this source's {@link UnavailableReason}: the client sets no reason, so the type holds for its
 * errors too.
 */
export function isIdsUnavailableError(e: unknown): e is IdsUnavailableError<UnavailableReason> {
  return isAnyIdsUnavailableError(e);
}
