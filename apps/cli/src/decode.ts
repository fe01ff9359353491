import { DEFAULT_LAYOUT, createLayout, formatId, parseId, type Layout } from '@idgen/core';

/** One decoded ID, as `idgen decode` prints it (DESIGN §6). */
export interface DecodedId {
  id: string;
  timestampMs: number;
  time: string;
  region: number;
  worker: number;
  sequence: number;
}

/** Decodes the decimal text of an ID; throws `RangeError` naming the problem. */
export function decodeId(text: string, layout: Layout = DEFAULT_LAYOUT): DecodedId {
  const id = parseId(text);
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
