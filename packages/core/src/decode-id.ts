import { parseId } from './id.js';
import { DEFAULT_LAYOUT, type IdFields, type Layout } from './layout.js';

/**
 * The fields of an ID: `DEFAULT_LAYOUT.decompose` under the name a user looks for. Takes the ID as
 * a `bigint` (what `@idgen/client` hands out) or in its canonical decimal form (what JSON and logs carry,
 * parsed with {@link parseId}). `timestampMs` counts from the layout's epoch: `layout.unixMsOf(id)` gives Unix
 * milliseconds.
 *
 * Throws `RangeError` for an ID outside 0 … 2^63 − 1, and {@link InvalidIdError} for a text that is not one.
 *
 * @example
 * ```ts
 * decodeId(104148763141017605n); // { timestampMs: 24831000123, region: 2, worker: 17, sequence: 5 }
 * ```
 */
export function decodeId(id: bigint | string, layout: Layout = DEFAULT_LAYOUT): IdFields {
  return layout.decompose(typeof id === 'string' ? parseId(id) : id);
}
