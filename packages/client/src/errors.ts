// The client's error family is the contract every ID source shares (`@idgen/core`'s id-source.ts): the embedded
// source throws the same classes, so a caller that switches between the two keeps its error handling.
export { IdClientError, IdsUnavailableError, isIdClientError, isIdsUnavailableError } from '@idgen/core';
export type { AttemptFailure, IdClientErrorCode } from '@idgen/core';
