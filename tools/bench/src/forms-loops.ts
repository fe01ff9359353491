import {
  type KeyedForm,
  formatBase32Id,
  formatPaddedId,
  parseBase32Id,
  parsePaddedId,
  spreadId,
  unspreadId,
} from '@idgen/core';
import { consume } from './core-loops.js';
import { type Round, nowNs } from './rounds.js';

/**
 * Throughput loops over the core's ID forms (issue 35), for `bench:core`'s forms table: each converts every entry of a
 * pool of IDs (or of their texts) and folds the result into the sink. One function literal per form and direction, as
 * in `core-loops.ts`: a shared loop calling a different converter each time would measure V8's inline caches.
 */

/** One form's pair of loops: format a pool of IDs, parse the pool's texts (or values) back. */
export interface FormLoops {
  readonly name: string;
  readonly format: Round;
  readonly parse: Round;
}

/** A round over `pool.length` conversions a batch, timed like the minting rounds. */
function timed(budgetMs: number, batch: number, body: () => bigint): { ids: number; calls: number; elapsedNs: number } {
  let fold = 0n;
  let calls = 0;
  const start = nowNs();
  const end = start + budgetMs * 1e6;
  let now = start;
  while (now < end) {
    fold ^= body();
    calls += batch;
    now = nowNs();
  }
  consume(fold);
  return { ids: calls, calls, elapsedNs: now - start };
}

/** The loops of the baseline (`BigInt.prototype.toString()` and `BigInt(text)`) and of each form, over `ids`. */
export function formLoops(ids: readonly bigint[], keyed: KeyedForm): FormLoops[] {
  const n = ids.length;
  const decimal = ids.map((id) => id.toString());
  const base32 = ids.map(formatBase32Id);
  const padded = ids.map(formatPaddedId);
  const spread = ids.map((id) => spreadId(id));
  const hidden = ids.map((id) => keyed.hide(id));
  return [
    {
      name: 'BigInt toString() / BigInt(text) (baseline)',
      format: (ms) =>
        timed(ms, n, () => {
          let f = 0;
          for (let i = 0; i < n; i++) f += (ids[i] as bigint).toString().length;
          return BigInt(f);
        }),
      parse: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= BigInt(decimal[i] as string);
          return f;
        }),
    },
    {
      name: 'base32 (formatBase32Id / parseBase32Id)',
      format: (ms) =>
        timed(ms, n, () => {
          let f = 0;
          for (let i = 0; i < n; i++) f += formatBase32Id(ids[i] as bigint).charCodeAt(12);
          return BigInt(f);
        }),
      parse: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= parseBase32Id(base32[i] as string);
          return f;
        }),
    },
    {
      name: 'decimal (formatPaddedId / parsePaddedId)',
      format: (ms) =>
        timed(ms, n, () => {
          let f = 0;
          for (let i = 0; i < n; i++) f += formatPaddedId(ids[i] as bigint).charCodeAt(18);
          return BigInt(f);
        }),
      parse: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= parsePaddedId(padded[i] as string);
          return f;
        }),
    },
    {
      name: 'spread (spreadId / unspreadId)',
      format: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= spreadId(ids[i] as bigint);
          return f;
        }),
      parse: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= unspreadId(spread[i] as bigint);
          return f;
        }),
    },
    {
      name: 'keyed (KeyedForm hide / reveal)',
      format: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= keyed.hide(ids[i] as bigint);
          return f;
        }),
      parse: (ms) =>
        timed(ms, n, () => {
          let f = 0n;
          for (let i = 0; i < n; i++) f ^= keyed.reveal(hidden[i] as bigint);
          return f;
        }),
    },
  ];
}
