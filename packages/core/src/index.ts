/**
 * `@idgen/core`: the ID layout and the pure minting state machine (docs/design.md §1, §4).
 * No I/O, no clock of its own, no dependencies.
 *
 * @packageDocumentation
 */
export {
  DEFAULT_EPOCH_MS,
  DEFAULT_LAYOUT,
  DEFAULT_REGION_BITS,
  DEFAULT_SEQUENCE_BITS,
  DEFAULT_TIMESTAMP_BITS,
  DEFAULT_WORKER_BITS,
  ID_BITS,
  Layout,
  MAX_ID,
  createLayout,
} from './layout.js';
export type { IdFields, LayoutOptions, LayoutRecord } from './layout.js';
export { InvalidIdError, formatId, isInvalidIdError, parseId } from './id.js';
export { decodeId } from './decode-id.js';
export {
  BASE32_ID_LENGTH,
  PADDED_ID_LENGTH,
  SPREAD_LEADING_TIMESTAMP_BITS,
  formatBase32Id,
  formatPaddedId,
  parseBase32Id,
  parsePaddedId,
  spreadBitOrder,
  spreadId,
  unspreadId,
} from './forms.js';
export { KEYED_FORM_MAX_KEY_BYTES, KEYED_FORM_MIN_KEY_BYTES, KeyedForm, createKeyedForm } from './keyed-form.js';
export { ID_FORMS, IdForms, createIdForms, isIdForm } from './id-forms.js';
export type { FormCallOptions, IdForm, IdFormsOptions, IdInForm } from './id-forms.js';
export type { InvalidIdReason } from './id.js';
export type { LeaseExtension, WorkerAssignment } from './assignment.js';
export type { FlagDoc, NamedValue } from './flag-doc.js';
export type { ClockSource } from './clock-source.js';
export { systemClock } from './system-clock.js';
export { refuseUnknownOptions } from './option-names.js';
export type { OptionNames } from './option-names.js';
export {
  IdClientError,
  IdsUnavailableError,
  MAX_NEXT_IDS,
  isIdClientError,
  isIdsUnavailableError,
} from './id-source.js';
export type { AttemptFailure, CallOptions, IdClientErrorCode, UnavailableDetails } from './id-source.js';
export { Minter, createMinter, isMintVerdict } from './minter.js';
export type {
  BelowFloor,
  ClockBehind,
  ClockOutOfRange,
  MintVerdict,
  MintedBlock,
  MinterOptions,
  MinterSnapshot,
  SequenceExhausted,
} from './minter.js';
