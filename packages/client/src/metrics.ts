import type { Counter, Histogram, Meter, ObservableCounter } from '@opentelemetry/api';

/**
 * Metric names of `@idgen/client` (docs/style.md "Metrics": `as const`, dot-namespaced, one file).
 * The buffer counters are observable counters read from plain fields at collection time, so a
 * buffered `nextId()` pays no metrics call on its hot path (which must stay well
 * under a microsecond).
 */
export const CLIENT_METRIC_NAMES = {
  /** IDs handed out straight from the buffer. */
  bufferHits: 'idgen.client.buffer.hits',
  /** Calls that found the buffer empty and had to wait for a refill. */
  bufferMisses: 'idgen.client.buffer.misses',
  /** IDs thrown away because they sat in the buffer for `maxAgeMs` (docs/design.md §3: 1 s). */
  bufferDiscarded: 'idgen.client.buffer.discarded',
  /** Failed attempts on a node that were retried on another node or after a backoff. */
  retries: 'idgen.client.retries',
  /** Refills served by a fallback region because every home node had failed. */
  failovers: 'idgen.client.failovers',
  /** Time from sending a refill request to its IDs landing in the buffer (successful attempts). */
  refillLatency: 'idgen.client.refill.latency',
  /**
   * Blocks refused by the client's checks (block-guard.ts): IDs of a region that is neither home nor a fallback
   * (`idgen.refusal` `foreign-region`), or a block not above the last one taken from its worker (`replayed`).
   */
  blocksRefused: 'idgen.client.blocks.refused',
  /** Hedged refills: a refill its node had not answered within the hedge delay, asked of a second node too. */
  hedgesSent: 'idgen.client.hedges.sent',
  /** Hedged refills whose second node answered first (its IDs were handed out). */
  hedgesWon: 'idgen.client.hedges.won',
  /** Blocks of a hedged refill's losing answer, discarded and never handed out (a gap, never a duplicate). */
  hedgeBlocksDiscarded: 'idgen.client.hedges.discarded',
} as const;

/** Attribute keys (values stay low-cardinality: region codes 0-7 and a two-value outcome). */
export const CLIENT_METRIC_ATTRIBUTES = {
  /** Region code of the node that served (or failed) a request. */
  region: 'idgen.region',
  /** Why a block was refused: `foreign-region` or `replayed`. */
  refusal: 'idgen.refusal',
} as const;

/** The counters the client keeps as plain numbers; the meter observes them. */
export interface ClientCounters {
  hits: number;
  misses: number;
  discarded: number;
  retries: number;
  failovers: number;
  /** Blocks refused because their IDs carry a region that is neither home nor a fallback. */
  refusedForeignRegion: number;
  /** Blocks refused because they were not above the last block taken from the same region and worker. */
  refusedReplayed: number;
  /** Refills asked of a second node because the first had not answered within the hedge delay. */
  hedgesSent: number;
  /** Hedged refills the second node won. */
  hedgesWon: number;
  /** Blocks of losing answers, discarded (never handed out). */
  hedgeBlocksDiscarded: number;
}

/** Instruments of one client instance. */
export interface ClientInstruments {
  readonly refillLatency: Histogram;
  readonly failoversByRegion: Counter;
  /** Refused blocks, by region and reason (rare: a plain counter). */
  readonly blocksRefused: Counter;
  /** Hedges sent, by the region of the second node (rare: a plain counter). */
  readonly hedgesSent: Counter;
  /** Hedges won, by the winner's region. */
  readonly hedgesWon: Counter;
  /** Discarded blocks of losing answers, by the loser's region. */
  readonly hedgeBlocksDiscarded: Counter;
  /** Stops the observable callbacks (on `close()`). */
  close(): void;
}

/** Creates the instruments on `meter` and observes `counters` from them. */
export function createClientInstruments(meter: Meter, counters: ClientCounters): ClientInstruments {
  const observable = (name: string, unit: string, description: string): ObservableCounter =>
    meter.createObservableCounter(name, { unit, description });
  const hits = observable(CLIENT_METRIC_NAMES.bufferHits, '{id}', 'IDs handed out straight from the buffer.');
  const misses = observable(
    CLIENT_METRIC_NAMES.bufferMisses,
    '{call}',
    'Calls that found the buffer empty and waited for a refill.',
  );
  const discarded = observable(
    CLIENT_METRIC_NAMES.bufferDiscarded,
    '{id}',
    'IDs discarded because they were not handed out within maxAgeMs of arriving.',
  );
  const retries = observable(
    CLIENT_METRIC_NAMES.retries,
    '{attempt}',
    'Failed attempts on a node that were retried on another node or after a backoff.',
  );
  const batch = [hits, misses, discarded, retries];
  const callback = (result: { observe(o: ObservableCounter, value: number): void }): void => {
    result.observe(hits, counters.hits);
    result.observe(misses, counters.misses);
    result.observe(discarded, counters.discarded);
    result.observe(retries, counters.retries);
  };
  meter.addBatchObservableCallback(callback, batch);
  // Failovers are rare and worth a region attribute: a plain counter costs nothing here.
  const failoversByRegion = meter.createCounter(CLIENT_METRIC_NAMES.failovers, {
    unit: '{refill}',
    description: 'Refills served by a fallback region because every home node had failed and the buffer was empty.',
  });
  const blocksRefused = meter.createCounter(CLIENT_METRIC_NAMES.blocksRefused, {
    unit: '{block}',
    description:
      'Blocks refused: IDs of a region neither home nor fallback, or not above the last block of their worker.',
  });
  // Hedges happen when a node is slow or frozen: rare, worth a region attribute, plain counters as failovers.
  const hedgesSent = meter.createCounter(CLIENT_METRIC_NAMES.hedgesSent, {
    unit: '{refill}',
    description: 'Refills asked of a second node because the first had not answered within the hedge delay.',
  });
  const hedgesWon = meter.createCounter(CLIENT_METRIC_NAMES.hedgesWon, {
    unit: '{refill}',
    description: 'Hedged refills whose second node answered first.',
  });
  const hedgeBlocksDiscarded = meter.createCounter(CLIENT_METRIC_NAMES.hedgeBlocksDiscarded, {
    unit: '{block}',
    description: 'Blocks of a hedged refill answered after the winner: discarded, never handed out.',
  });
  const refillLatency = meter.createHistogram(CLIENT_METRIC_NAMES.refillLatency, {
    unit: 'ms',
    description: 'Time from sending a refill request to its IDs landing in the buffer.',
    advice: { explicitBucketBoundaries: [0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500] },
  });
  return {
    refillLatency,
    failoversByRegion,
    blocksRefused,
    hedgesSent,
    hedgesWon,
    hedgeBlocksDiscarded,
    close: () => meter.removeBatchObservableCallback(callback, batch),
  };
}
