import type { Counter, Meter, ObservableGauge, ObservableResult } from '@opentelemetry/api';
import { LeaseAttributes, LeaseMetrics } from './metrics.js';
import type { ChurnEvent } from './metrics.js';

/**
 * The etcd lease's instruments (docs/design.md §5, the lease's metrics): slot churn, keep-alive failures and the age of
 * the last acknowledged keep-alive, read from the held session when scraped.
 */
export class LeaseInstruments {
  private readonly churn: Counter;
  /** Keep-alives (or their `last-ms` refresh) that failed or timed out. */
  readonly failures: Counter;
  private readonly age: ObservableGauge;
  private readonly observeAge = (r: ObservableResult): void => {
    const seconds = this.keepAliveAgeSeconds();
    if (seconds !== undefined) r.observe(seconds);
  };

  constructor(
    meter: Meter,
    /** Seconds since the held session's last acknowledged keep-alive; `undefined` when none is held. */
    private readonly keepAliveAgeSeconds: () => number | undefined,
  ) {
    this.churn = meter.createCounter(LeaseMetrics.churn, {
      description: 'Worker-slot lease churn: slots acquired, lost (fenced) and released.',
      unit: '{event}',
    });
    this.failures = meter.createCounter(LeaseMetrics.keepAliveFailures, {
      description: 'Keep-alives (or their last-ms refresh) that failed or timed out.',
      unit: '{failure}',
    });
    this.age = meter.createObservableGauge(LeaseMetrics.keepAliveAge, {
      description: 'Seconds since the last acknowledged keep-alive of the held lease.',
      unit: 's',
    });
    this.age.addCallback(this.observeAge);
    // Every series exists from the start, at 0: `rate()` and `increase()` have a baseline, and an
    // alert on the first keep-alive failure or the first lost slot fires.
    for (const event of [LeaseAttributes.acquired, LeaseAttributes.lost, LeaseAttributes.released])
      this.churn.add(0, { [LeaseAttributes.event]: event });
    this.failures.add(0);
  }

  /** Counts one churn event. */
  count(event: ChurnEvent): void {
    this.churn.add(1, { [LeaseAttributes.event]: event });
  }

  /** Stops observing the keep-alive age (the lease was released). */
  close(): void {
    this.age.removeCallback(this.observeAge);
  }
}
