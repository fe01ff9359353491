import { DEFAULT_LAYOUT, MAX_ID, createLayout, formatId, parseId, type Layout } from '@idgen/core';

/** One decoded ID, as `idgen decode` prints it (docs/design.md §6). */
export interface DecodedId {
  id: string;
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

/** Decodes the text of an ID (decimal, or hex with `0x`); throws `RangeError` naming the problem. */
export function decodeId(text: string, layout: Layout = DEFAULT_LAYOUT): DecodedId {
  const id = parseIdText(text);
  const f = layout.decompose(id);
  return {
    id: formatId(id),
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
