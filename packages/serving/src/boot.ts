import { untilTimeSourceHealthy } from '@idgen/clock-guard';
import type { TimeSourceCheck } from '@idgen/clock-guard';
import type { LeaseSnapshot, WorkerLease } from '@idgen/lease';

/** Where boot logs (a pino logger fits). */
export interface BootLogger {
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

/** What boot drives. */
export interface BootDeps {
  readonly timeSource: Pick<TimeSourceCheck, 'start' | 'readNow'>;
  readonly lease: Pick<WorkerLease, 'start' | 'register' | 'on' | 'snapshot'>;
  readonly logger: BootLogger;
  /** Aborts boot (a SIGTERM while booting). */
  readonly signal: AbortSignal;
  /** How often to re-read an unhealthy time source while waiting for it; default 2000 ms. */
  readonly timeSourceRetryMs?: number;
  /** Monotonic milliseconds; default `performance.now()`. */
  readonly now?: () => number;
}

/** The outcome of boot, for the `ready` log line. */
export interface BootReport {
  /** Milliseconds from the start of boot to ready. */
  readonly bootMs: number;
  /** Each step and how long it took, in milliseconds. */
  readonly steps: Readonly<Record<string, number>>;
  readonly lease: LeaseSnapshot;
}

/**
 * docs/design.md §5 boot steps 2-6, each logged with its duration: check the time source (waiting while it is
 * unhealthy: a node does not become ready on an untrusted clock, docs/design.md §4), then the lease (connect to
 * etcd with retries and backoff, layout record, grant, claim, floor wait: inside `lease.start`, whose state
 * changes are logged as they happen), then register in discovery. Ready is the caller's to announce.
 */
export async function boot(deps: BootDeps): Promise<BootReport> {
  const now = deps.now ?? (() => performance.now());
  const { logger, signal } = deps;
  const started = now();
  const steps: Record<string, number> = {};
  const step = async <T>(
    name: string,
    run: () => Promise<T>,
    fields: (r: T) => Record<string, unknown>,
  ): Promise<T> => {
    signal.throwIfAborted();
    const t0 = now();
    logger.info({ step: name }, `boot: ${name}`);
    const result = await run();
    const ms = Math.round((now() - t0) * 10) / 10;
    steps[name] = ms;
    logger.info({ step: name, ms, ...fields(result) }, `boot: ${name} done`);
    return result;
  };

  await step(
    'time-source',
    () =>
      untilTimeSourceHealthy(deps.timeSource, {
        retryMs: deps.timeSourceRetryMs ?? 2000,
        signal,
        onUnhealthy: (reading) =>
          logger.error(
            { step: 'time-source', problem: reading.problem, timeSource: reading.message },
            `boot: time source unhealthy (${reading.problem ?? 'unknown'}), not ready; re-checking`,
          ),
      }),
    (r) => ({ healthy: r.healthy, timeSource: r.message, offsetSeconds: r.offsetSeconds }),
  );

  // The lease's own sub-steps (claiming, waiting-for-floor, alive) are logged as they happen.
  let last = { state: deps.lease.snapshot().state as string, at: now() };
  const unsubscribe = deps.lease.on('state', (s) => {
    if (s.state === last.state) return;
    const t = now();
    logger.info(
      {
        step: 'lease',
        state: s.state,
        previous: last.state,
        previousMs: Math.round(t - last.at),
        worker: s.worker,
        leaseId: s.leaseId,
        floorMs: s.floorMs,
        detail: s.message,
      },
      `lease: ${s.state}`,
    );
    last = { state: s.state, at: t };
  });
  try {
    await step(
      'lease',
      () => deps.lease.start(signal),
      () => {
        const s = deps.lease.snapshot();
        return { worker: s.worker, region: s.region, leaseId: s.leaseId, floorMs: s.floorMs, mode: s.mode };
      },
    );
  } finally {
    unsubscribe();
  }

  await step(
    'register',
    () => deps.lease.register(),
    () => ({}),
  );
  return { bootMs: Math.round(now() - started), steps, lease: deps.lease.snapshot() };
}
