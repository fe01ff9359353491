import { MAX_ID } from './layout.js';

/**
 * Why a text is not an ID. `wrong-length` and `bad-character` come from the fixed-width forms (`parseBase32Id`,
 * `parsePaddedId`), which name the character and its position.
 */
export type InvalidIdReason = 'empty' | 'not-decimal' | 'negative' | 'out-of-range' | 'wrong-length' | 'bad-character';

const BRAND = Symbol.for('@idgen/core/InvalidIdError');

/**
 * A text or value that is not an ID. A `RangeError`, so callers that only check for that still work.
 * Use {@link isInvalidIdError} rather than `instanceof` (two copies of the package may be loaded).
 */
export class InvalidIdError extends RangeError {
  override readonly name = 'InvalidIdError';
  readonly [BRAND] = true;

  constructor(
    readonly reason: InvalidIdReason,
    readonly input: string,
    message: string,
  ) {
    super(message);
  }
}

/** True when `e` is an {@link InvalidIdError} from any copy of this package. */
export function isInvalidIdError(e: unknown): e is InvalidIdError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[BRAND] === true;
}

const DECIMAL = /^(0|[1-9][0-9]*)$/;
/** 2^63 − 1 has 19 digits: longer texts are rejected before `BigInt` parses them. */
const MAX_DIGITS = MAX_ID.toString().length;

/**
 * Parses the canonical decimal form of an ID (what {@link formatId} prints, and what JSON, logs and the
 * CLI carry): digits only, no sign, no leading zeros, no spaces, 0 … 2^63 − 1.
 * Throws {@link InvalidIdError} naming the problem.
 */
export function parseId(text: string): bigint {
  if (typeof text !== 'string') {
    throw new InvalidIdError(
      'not-decimal',
      String(text),
      `an ID must be given as a decimal string, got ${typeof text}`,
    );
  }
  const shown = JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
  if (text.length === 0) throw new InvalidIdError('empty', text, 'an ID must not be empty');
  if (/^-[0-9]+$/.test(text)) {
    throw new InvalidIdError('negative', text, `${shown} is negative: IDs are from 0 to ${MAX_ID}`);
  }
  if (!DECIMAL.test(text)) {
    throw new InvalidIdError(
      'not-decimal',
      text,
      `${shown} is not a decimal integer (digits only, no sign, no leading zeros)`,
    );
  }
  if (text.length > MAX_DIGITS || BigInt(text) > MAX_ID) {
    throw new InvalidIdError(
      'out-of-range',
      text,
      `${shown} is above ${MAX_ID} (2^63 − 1): it does not fit in a signed 64-bit integer`,
    );
  }
  return BigInt(text);
}

/** The canonical decimal form of an ID; throws `RangeError` outside 0 … 2^63 − 1. */
export function formatId(id: bigint): string {
  if (typeof id !== 'bigint' || id < 0n || id > MAX_ID) {
    throw new RangeError(`an ID must be a bigint from 0 to ${MAX_ID}, got ${String(id)}`);
  }
  return id.toString();
}
