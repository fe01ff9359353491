/**
 * `@idgen/embedded`: IDs minted in the caller's own process (docs/design.md §7). A source leases a worker slot
 * from the region's etcd (`kind: embedded`, from the embedded range, 18-127 by default) and mints through the
 * clock guard under the same rules as a generator node: the lease's fence deadline and wall ceiling, the floor,
 * the time-source check, the final `last-ms` on close. The asynchronous calls are `@idgen/client`'s; a fence is
 * `IdsUnavailableError`, never an invented ID.
 *
 * @packageDocumentation
 */
export { DEFAULT_DEADLINE_MS, DEFAULT_SLOT_WAIT_MS, MAX_NEXT_IDS, createEmbeddedIdSource } from './embedded.js';
export type {
  CallOptions,
  EmbeddedIdSource,
  EmbeddedIdSourceOptions,
  EmbeddedState,
  EmbeddedStatus,
} from './embedded.js';
export {
  IdClientError,
  IdsUnavailableError,
  RangeFullError,
  isIdClientError,
  isIdsUnavailableError,
} from './errors.js';
export type { AttemptFailure, IdClientErrorCode, UnavailableReason } from './errors.js';
export { DEFAULT_EMBEDDED_WORKERS, DEFAULT_NODE_WORKERS, slotBudget } from './slot-budget.js';
export type { SlotBudget } from './slot-budget.js';
export { LeaseConfigError, isLeaseError } from '@idgen/lease';
export type { EtcdConnectionOptions, EtcdTlsOptions, LeaseLogger, WorkerRange } from '@idgen/lease';
export type { FenceReason } from '@idgen/clock-guard';
// The forms `nextId({ form })` hands out (docs/design.md §1 "Forms"); `createIdForms` in `@idgen/core` reads them back.
export type { FormCallOptions, IdForm, IdInForm } from '@idgen/core';
