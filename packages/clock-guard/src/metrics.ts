import type { Attributes, Meter, ObservableResult } from '@opentelemetry/api';
import { FENCE_REASONS } from './errors.js';

/**
 * Metric names of `@idgen/clock-guard` (docs/design.md §2: count what comes before a duplicate).
 * Every instrument is observable: the guard keeps plain counters and the SDK reads them at collection
 * time, so minting pays nothing for metrics.
 */
export const ClockGuardMetrics = {
  /** Wall-clock rollbacks seen while minting (attribute `outcome`: waited | fenced). */
  rollbacks: 'idgen.clock.rollbacks',
  /** Waits for the next millisecond because the sequence of the current one was spent. */
  overflowWaits: 'idgen.sequence.overflow_waits',
  /** Times the guard entered a fence (attribute `reason`). */
  fences: 'idgen.fences',
  /** Offset of the system clock from its reference, in seconds, as the time source reports it. */
  clockOffset: 'idgen.clock.offset',
  /** IDs minted. */
  idsMinted: 'idgen.ids.minted',
} as const;

/** Attribute keys used by the metrics above. */
export const ClockGuardAttributes = {
  outcome: 'outcome',
  reason: 'reason',
} as const;

/** The plain counters the guard keeps; the metrics read them. */
export interface GuardCounters {
  idsMinted: number;
  overflowWaits: number;
  rollbacksWaited: number;
  rollbacksFenced: number;
  /** Fences entered, by reason. */
  fences: Record<string, number>;
  /** Last offset the time source reported, in seconds; undefined before the first reading. */
  offsetSeconds: number | undefined;
}

/** Registers the guard's observable instruments on `meter`, reading `read()` at each collection. */
export function registerGuardMetrics(meter: Meter, read: () => GuardCounters): void {
  const observe =
    (fn: (c: GuardCounters, r: ObservableResult<Attributes>) => void) => (r: ObservableResult<Attributes>) =>
      fn(read(), r);
  meter
    .createObservableCounter(ClockGuardMetrics.rollbacks, {
      description: 'Wall-clock rollbacks seen while minting: waited out when small, fenced when large.',
      unit: '{rollback}',
    })
    .addCallback(
      observe((c, r) => {
        r.observe(c.rollbacksWaited, { [ClockGuardAttributes.outcome]: 'waited' });
        r.observe(c.rollbacksFenced, { [ClockGuardAttributes.outcome]: 'fenced' });
      }),
    );
  meter
    .createObservableCounter(ClockGuardMetrics.overflowWaits, {
      description: 'Waits for the next millisecond because the sequence of the current one was spent.',
      unit: '{wait}',
    })
    .addCallback(observe((c, r) => r.observe(c.overflowWaits)));
  meter
    .createObservableCounter(ClockGuardMetrics.fences, {
      description: 'Times minting was fenced (refused), by reason.',
      unit: '{fence}',
    })
    .addCallback(
      observe((c, r) => {
        // Every reason from the start, at 0 until its first fence: rate() and alerts need the baseline.
        for (const reason of FENCE_REASONS) r.observe(c.fences[reason] ?? 0, { [ClockGuardAttributes.reason]: reason });
      }),
    );
  meter
    .createObservableGauge(ClockGuardMetrics.clockOffset, {
      description: 'Offset of the system clock from its time source, as the time source reports it.',
      unit: 's',
    })
    .addCallback(
      observe((c, r) => {
        if (c.offsetSeconds !== undefined) r.observe(c.offsetSeconds);
      }),
    );
  meter
    .createObservableCounter(ClockGuardMetrics.idsMinted, { description: 'IDs minted.', unit: '{id}' })
    .addCallback(observe((c, r) => r.observe(c.idsMinted)));
}
