import { readFileSync } from 'node:fs';
import {
  DEFAULT_LAYOUT,
  ID_FORMS,
  MAX_ID,
  createIdForms,
  createLayout,
  formatId,
  isIdForm,
  parseId,
  type IdForm,
  type IdForms,
  type Layout,
} from '@idgen/core';

/** One decoded ID, as `idgen decode` prints it (docs/design.md §6). */
export interface DecodedId {
  id: string;
  /** The form the input was read in (docs/design.md §1 "Forms"); absent for the plain ID (decimal, or hex with 0x). */
  form?: IdForm;
  timestampMs: number;
  time: string;
  region: number;
  worker: number;
  sequence: number;
}

const HEX = /^0[xX][0-9a-fA-F]+$/;

/**
 * Parses an ID given in decimal (`104148763141017605`, the form the API and logs use) or in hex with `0x`
 * (`0x17203a3a5c0f1005`); throws `RangeError` naming the problem.
 */
export function parseIdText(text: string): bigint {
  const shown = JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
  // "0x" starts a hex ID: say what is wrong with it as hex, not that it is no decimal integer.
  if (/^0[xX]/.test(text) && !HEX.test(text))
    throw new RangeError(
      text.length === 2
        ? `${shown} is not a hex ID: give its digits after 0x (0-9, a-f)`
        : `${shown} is not a hex ID: after 0x only hex digits (0-9, a-f) may follow`,
    );
  if (!HEX.test(text)) return parseId(text);
  const id = BigInt(text);
  if (id > MAX_ID)
    throw new RangeError(
      `${shown} is above 0x${MAX_ID.toString(16)} (2^63 − 1): it does not fit in a signed 64-bit integer`,
    );
  return id;
}

/** What `--from` may name: the plain ID (decimal, or hex with 0x) or one of the forms. */
export type InputForm = 'plain' | IdForm;

/** How IDs given to `idgen decode` and `idgen format` are read: `--from`, and the forms of `--key-file`. */
export interface IdReader {
  /** The form every input is in (`--from`); undefined: told by its shape ({@link readIdText}). */
  readonly from: InputForm | undefined;
  /** The deployment's forms, keyed when `--key-file` was given. */
  readonly forms: IdForms;
  /** What an integer is without `--from`: `keyed` in `idgen decode --key-file`, else `plain`. */
  readonly integers: 'plain' | 'keyed';
}

/**
 * Parses `--from` and reads `--key-file` (hex text, 32–128 digits, docs/design.md §1 "Forms") into an
 * {@link IdReader}; throws `RangeError` with a one-line reason naming the flag.
 */
export function idReader(
  flags: { from?: string; keyFile?: string },
  integers: 'plain' | 'keyed-with-key',
  layout: Layout = DEFAULT_LAYOUT,
): IdReader {
  const from = flags.from;
  if (from !== undefined && from !== 'plain' && !isIdForm(from)) {
    throw new RangeError(`--from ${JSON.stringify(from)} is not a form: give plain, ${ID_FORMS.join(', ')}`);
  }
  let key: string | undefined;
  if (flags.keyFile !== undefined) {
    try {
      key = readFileSync(flags.keyFile, 'utf8').trim();
    } catch (e) {
      throw new RangeError(`--key-file ${flags.keyFile}: cannot read it (${(e as NodeJS.ErrnoException).code ?? e})`);
    }
  }
  try {
    const forms = createIdForms({ layout, key });
    return { from, forms, integers: integers === 'keyed-with-key' && forms.hasKey ? 'keyed' : 'plain' };
  } catch (e) {
    throw new RangeError(`--key-file ${flags.keyFile}: ${(e as Error).message}`);
  }
}

/**
 * Reads one ID in any form; returns it with the form it was read in. Without `--from` the shape tells: `0x…` or a
 * canonical decimal is the plain ID (or the keyed form's, as {@link IdReader.integers} says: a keyed ID looks like
 * any other integer); 19 digits with a leading 0 the zero-padded decimal form; 13 characters, not all digits, the base32
 * form (any other text is refused as a plain ID would be). A 13-digit text is both a plain and a base32 ID: refused, naming `--from`.
 * The spread form has the shape of a plain ID and is read only with `--from spread`. Throws `RangeError` (or
 * `TypeError` for the keyed form without a key) naming the problem.
 */
export function readIdText(text: string, reader: IdReader): { id: bigint; form: InputForm } {
  const from = reader.from ?? shapeOf(text, reader);
  if (from === 'plain') return { id: parseIdText(text), form: 'plain' };
  if (from === 'keyed' && !reader.forms.hasKey) {
    throw new RangeError('the keyed form needs the deployment key: give --key-file');
  }
  if (from === 'spread' || from === 'keyed') return { id: reader.forms.parse(parseIdText(text), from), form: from };
  return { id: reader.forms.parse(text, from), form: from };
}

function shapeOf(text: string, reader: IdReader): InputForm {
  if (/^0[xX]/.test(text)) return reader.integers;
  if (/^[0-9]+$/.test(text)) {
    if (text.length === 13) {
      throw new RangeError(
        `${JSON.stringify(text)} is both a plain ID and a base32 one: say --from plain or --from base32`,
      );
    }
    if (text.length === 19 && text.startsWith('0')) return 'decimal';
    return reader.integers;
  }
  return text.length === 13 ? 'base32' : reader.integers;
}

/** Decodes the text of an ID (decimal, or hex with `0x`); throws `RangeError` naming the problem. */
export function decodeId(
  text: string,
  layout: Layout = DEFAULT_LAYOUT,
  reader: IdReader = { from: undefined, forms: createIdForms({ layout }), integers: 'plain' },
): DecodedId {
  const { id, form } = readIdText(text, reader);
  const f = layout.decompose(id);
  return {
    id: formatId(id),
    ...(form === 'plain' ? {} : { form }),
    timestampMs: f.timestampMs,
    time: layout.dateOf(id).toISOString(),
    region: f.region,
    worker: f.worker,
    sequence: f.sequence,
  };
}

/**
 * Parses `--epoch`: an ISO-8601 instant with a zone (`2024-01-01T00:00:00.000Z`) or Unix milliseconds.
 * Returns the layout with that epoch; throws `RangeError` with a one-line reason.
 */
export function layoutWithEpoch(epoch: string): Layout {
  let epochMs: number;
  if (/^[0-9]+$/.test(epoch)) {
    epochMs = Number(epoch);
  } else if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/.test(epoch)) {
    epochMs = Date.parse(epoch);
  } else {
    throw new RangeError(
      `--epoch ${JSON.stringify(epoch)} is neither Unix milliseconds nor an ISO-8601 instant with a zone ` +
        `(e.g. 2024-01-01T00:00:00.000Z)`,
    );
  }
  if (!Number.isSafeInteger(epochMs)) throw new RangeError(`--epoch ${JSON.stringify(epoch)} is not a valid instant`);
  try {
    return createLayout({ epochMs });
  } catch (e) {
    throw new RangeError(`--epoch ${JSON.stringify(epoch)}: ${(e as Error).message}`);
  }
}
