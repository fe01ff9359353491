/**
 * `@idgen/client/testing`: a deterministic stand-in for the client in a team's unit tests, which
 * must not depend on a running node or on timing.
 * No node, no network, no timers: IDs come from one chosen region and worker in increasing order, and the
 * failures a caller must handle happen when the test asks for them.
 *
 * @packageDocumentation
 */
import { DEFAULT_LAYOUT, createIdForms, type FormCallOptions, type IdForm, type Layout } from '@idgen/core';
import { IdClientError, IdsUnavailableError } from './errors.js';
import type { CallOptions, IdClient, IdClientStats } from './id-client.js';
import { MAX_NEXT_IDS } from './id-client.js';

/** Options of {@link createTestIdClient}. */
export interface TestIdClientOptions {
  /** Region code the IDs carry (default 0). */
  readonly region?: number;
  /** Worker slot the IDs carry (default 0). */
  readonly worker?: number;
  /** Timestamp field of the first ID, in ms since the layout's epoch (default 0: the epoch itself). */
  readonly startTimestampMs?: number;
  /** Layout of the IDs (default `DEFAULT_LAYOUT`). */
  readonly layout?: Layout;
  /** The `keyed` form's key, as the client's `keyedFormKey` (without it that form is refused). */
  readonly keyedFormKey?: Uint8Array | string;
}

/** What a failure handed out by {@link TestIdClient} looks like. */
export type TestFailure = 'unavailable' | 'rejected';

/**
 * The client's surface ({@link IdClient}) plus the controls a test needs. Every ID is unique and above the one
 * before: the sequence counts up and carries into the next millisecond when full, exactly as a node mints.
 */
export interface TestIdClient extends IdClient {
  /**
   * Makes the next `calls` calls (default 1) fail: `'unavailable'` rejects with an `IdsUnavailableError`
   * (`isIdsUnavailableError(e)` is true, as when no node answers), `'rejected'` with an `IdClientError` of code
   * `rejected`. `tryNextId()` returns `undefined` for a failing call.
   */
  failNext(calls?: number, failure?: TestFailure): void;
  /** While `true`, every call fails as {@link failNext}'s `'unavailable'`; `false` ends it. */
  setUnavailable(unavailable: boolean): void;
  /** The IDs handed out so far, in order. */
  readonly issued: readonly bigint[];
}

/**
 * Creates a {@link TestIdClient}. Deterministic: two clients with the same options hand out the same IDs.
 *
 * @example
 * ```ts
 * const ids = createTestIdClient({ region: 2, worker: 5 });
 * await ids.nextId(); // region 2, worker 5, sequence 0
 * ids.failNext(); // the next call rejects with an IdsUnavailableError
 * ```
 */
export function createTestIdClient(options: TestIdClientOptions = {}): TestIdClient {
  const layout = options.layout ?? DEFAULT_LAYOUT;
  const region = options.region ?? 0;
  const worker = options.worker ?? 0;
  let timestampMs = options.startTimestampMs ?? 0;
  // compose() checks every field against the layout: an out-of-range region or worker throws here, naming the range.
  layout.compose({ timestampMs, region, worker, sequence: 0 });
  const forms = createIdForms({ layout, key: options.keyedFormKey });
  /** The form a call asks for, checked before an ID is taken (as the client does). */
  const formOf = (call: CallOptions | undefined): IdForm | undefined => {
    const form = (call as Partial<FormCallOptions> | undefined)?.form;
    return form === undefined ? undefined : forms.check(form);
  };
  let sequence = 0;
  let closed = false;
  let unavailable = false;
  const failures: TestFailure[] = [];
  const issued: bigint[] = [];
  /** IDs handed out, and calls failed on demand (reported as `hits` and `misses`). */
  const counters = { hits: 0, failures: 0 };

  const mint = (): bigint => {
    if (sequence > layout.maxSequence) {
      timestampMs++;
      sequence = 0;
    }
    const id = layout.compose({ timestampMs, region, worker, sequence: sequence++ });
    issued.push(id);
    return id;
  };
  /** The failure of this call, if any (consumed). */
  const failure = (): IdClientError | undefined => {
    if (closed) return new IdClientError('closed', 'the ID client is closed', false);
    const next = unavailable ? 'unavailable' : failures.shift();
    if (next === undefined) return undefined;
    counters.failures++;
    return next === 'unavailable'
      ? new IdsUnavailableError('no IDs within 0 ms: unavailable on demand (test client)', { waitedMs: 0 })
      : new IdClientError('rejected', 'rejected on demand (test client)', false);
  };
  const checkSignal = (call: CallOptions | undefined): void => {
    if (call?.signal?.aborted) throw call.signal.reason;
  };

  const client: TestIdClient = {
    get issued() {
      return issued;
    },
    failNext(calls = 1, kind: TestFailure = 'unavailable') {
      if (!Number.isInteger(calls) || calls < 1)
        throw new RangeError(`calls must be an integer of at least 1, got ${calls}`);
      for (let i = 0; i < calls; i++) failures.push(kind);
    },
    setUnavailable(value: boolean) {
      unavailable = value;
    },
    // The overloads of IdClient: a `form` in the call hands the ID out in that form.
    nextId: (async (call?: CallOptions) => {
      const form = formOf(call);
      checkSignal(call);
      const e = failure();
      if (e !== undefined) throw e;
      counters.hits++;
      const id = mint();
      return form === undefined ? id : forms.format(id, form);
    }) as IdClient['nextId'],
    nextIds: (async (count: number, call?: CallOptions) => {
      const form = formOf(call);
      if (!Number.isInteger(count) || count < 1 || count > MAX_NEXT_IDS) {
        throw new RangeError(
          `nextIds(count): count must be an integer from 1 to ${MAX_NEXT_IDS}, got ${String(count)}`,
        );
      }
      checkSignal(call);
      const e = failure();
      if (e !== undefined) throw e;
      counters.hits += count;
      const ids = Array.from({ length: count }, mint);
      return form === undefined ? ids : ids.map((id) => forms.format(id, form));
    }) as IdClient['nextIds'],
    async nextIdString(call?: CallOptions) {
      return (await client.nextId(call)).toString();
    },
    tryNextId() {
      if (failure() !== undefined) return undefined;
      counters.hits++;
      return mint();
    },
    stats(): IdClientStats {
      return {
        hits: counters.hits,
        misses: counters.failures,
        discarded: 0,
        retries: 0,
        failovers: 0,
        refusedForeignRegion: 0,
        refusedReplayed: 0,
        hedgesSent: 0,
        hedgesWon: 0,
        hedgeBlocksDiscarded: 0,
        buffered: 0,
        waiting: 0,
        refills: 0,
        nodes: [],
      };
    },
    async close() {
      closed = true;
    },
  };
  return client;
}
