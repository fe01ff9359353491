import { hostname } from 'node:os';
import { createMintScheduler, type GuardedMinter, type GuardStatus, type TimeSourceCheck } from '@idgen/clock-guard';
import type { LeaseSnapshot, WorkerLease } from '@idgen/lease';
import { boot, type BootReport } from './boot.js';
import { formatHostPort, type HostPort } from './host-port.js';
import { resolveServingLimits } from './limits.js';
import type { ServingMetrics } from './metrics.js';
import {
  READINESS_REASONS,
  createLeaseTroubleTracker,
  describeReadiness,
  judgeReadiness,
  watchReadiness,
  type Phase,
  type Readiness,
} from './readiness.js';
import { createServingPort, type ServingLogger, type ServingPort, type ServingPortOptions } from './serving-port.js';

/** Options of {@link createIdgenNode}: the node's parts, its addresses, and the serving port's limits. */
export interface IdgenNodeOptions extends Omit<
  ServingPortOptions,
  'guard' | 'mints' | 'lease' | 'phase' | 'readiness' | 'advertise' | 'metrics'
> {
  /** The one guard every mint goes through (`@idgen/clock-guard`). */
  readonly guard: GuardedMinter;
  /** The worker-slot lease over the same guard: `createEtcdLease`, or `createStandaloneLease` for one node. */
  readonly lease: WorkerLease;
  /** The time-source check reporting to the guard (`createTimeSourceCheck`); boot waits while it is unhealthy. */
  readonly timeSource: TimeSourceCheck;
  /** Where the serving port listens; port 0 picks a free one. */
  readonly listen: HostPort;
  /** The address callers dial, registered in discovery; default the bound address (the host name for 0.0.0.0 and ::). */
  readonly advertise?: string | undefined;
  /** The serving layer's instruments (`createServingMetrics`): the port's hooks and the node gauges. */
  readonly metrics?: Pick<ServingMetrics, 'hooks' | 'observeNode'>;
  /** Worker slots this node may claim, for the region-slots gauge; default 1. */
  readonly slots?: number;
  readonly logger?: ServingLogger;
}

/** A generator node wired from its parts (docs/design.md §5): one serving port, one boot, one graceful shutdown. */
export interface IdgenNode {
  readonly port: ServingPort;
  /** Why the node may or may not mint now (the judgement `/readyz`, Health/Check and GetStatus answer with). */
  readiness(): Readiness;
  /** Opens the serving port (not ready yet) and tells the lease the advertised address; rejects when it cannot listen. */
  listen(): Promise<{ readonly listen: string; readonly advertise: string }>;
  /**
   * docs/design.md §5 boot steps 2-6 (time source, lease, register), then serving. Resolves with the report, or
   * `undefined` when a shutdown began meanwhile; rejects when boot fails (a `LeaseError` says why).
   */
  start(): Promise<BootReport | undefined>;
  /**
   * Graceful shutdown: readiness false and every mint refused with UNAVAILABLE `draining`, calls in flight finished
   * (bounded), the lease released (bounded), every timer stopped. `undefined` when a shutdown is already under way.
   */
  shutdown(reason: string): Promise<{ readonly released: boolean } | undefined>;
}

/**
 * Wires a generator node from a guard, a lease and a time-source check: the mint scheduler, the serving port, one
 * readiness judgement for every probe and the log, the node gauges, the boot sequence and the shutdown order.
 * Logs with `logger` (pino's shape) what `idgen-server` logs; exiting and signals stay the caller's.
 */
export function createIdgenNode(options: IdgenNodeOptions): IdgenNode {
  const {
    guard,
    lease,
    timeSource,
    listen: _listen,
    advertise: advertiseOption,
    metrics,
    slots = 1,
    logger = SILENT,
    ...portOptions
  } = options;
  // Half of it for the calls in flight, the rest for the lease release (SERVING_LIMITS' default when not given).
  const { shutdownTimeoutMs } = resolveServingLimits(options);
  let phase: Phase = 'starting';
  let advertise = advertiseOption ?? formatHostPort(options.listen);
  // Readiness and why, judged in one place (judgeReadiness) for /readyz, Health/Check, GetStatus and the log.
  const leaseTrouble = createLeaseTroubleTracker(lease);
  const readiness = (): Readiness =>
    judgeReadiness({
      phase,
      canMint: guard.canMint(),
      guard: guard.status(),
      timeSourceMode: options.timeSourceMode,
      timeSource: timeSource.last(),
      lease: lease.snapshot(),
      leaseTrouble: leaseTrouble.current(),
      nowMs: Date.now(),
    });
  // One scheduler for every path that mints: requests that need a later millisecond wait on a timer, fairly
  // between connections, never spinning on the loop the lease's keep-alives run on (a
  // keep-alive that waits behind a spin fails, and the node fences).
  const port = createServingPort({
    ...portOptions,
    guard,
    mints: createMintScheduler(guard),
    lease: () => lease.snapshot(),
    phase: () => phase,
    advertise: () => advertise,
    readiness,
    ...(metrics === undefined ? {} : { metrics: metrics.hooks }),
    logger,
  });
  metrics?.observeNode(READINESS_REASONS, () => {
    const r = readiness();
    return {
      region: options.region,
      ready: r.ready,
      reason: r.reason,
      slotHeld: lease.snapshot().worker !== undefined,
      slots,
    };
  });
  // One log line each time the reason (or its cause) changes, from the first boot step on.
  const readinessLog = watchReadiness(readiness, (r, previous) => {
    const fields = {
      readiness: r.reason,
      cause: r.cause,
      detail: r.detail,
      waitMs: r.waitMs,
      previous: previous?.reason,
    };
    // Boot's own steps and a shutdown's drain are the node's normal course, not a warning (a normal start logs
    // no warning); every other reason is something an operator must see.
    if (r.ready) logger.info(fields, 'readiness: ready');
    else if (NORMAL_COURSE.has(r.reason)) logger.info(fields, `readiness: not ready, ${describeReadiness(r)}`);
    else logger.warn(fields, `readiness: not ready, ${describeReadiness(r)}`);
  });
  lease.on('state', () => readinessLog.poke());

  const bootAbort = new AbortController();
  let stopping = false;
  return {
    port,
    readiness,
    async listen() {
      const bound = await port.listen(options.listen);
      const listen = formatHostPort(bound);
      if (advertiseOption === undefined) {
        // An unspecified bind address is not dialable: advertise the host name instead.
        advertise =
          bound.host === '0.0.0.0' || bound.host === '::'
            ? formatHostPort({ host: hostname(), port: bound.port })
            : listen;
      }
      lease.setAddress(advertise);
      logger.info({ listen, advertise }, 'serving port open (not ready yet)');
      return { listen, advertise };
    },
    async start() {
      let report: BootReport;
      try {
        report = await boot({ timeSource, lease, logger, signal: bootAbort.signal });
      } catch (e) {
        if (stopping) return undefined;
        throw e;
      }
      if (stopping) return undefined;
      phase = 'running';
      guard.on('state', (s: GuardStatus) => {
        if (s.state === 'serving') logger.info({ worker: s.worker }, 'guard: serving');
        else if (s.reason === 'draining') logger.info({ reason: s.reason, detail: s.message }, 'guard: fenced');
        else logger.warn({ reason: s.reason, detail: s.message }, 'guard: fenced');
      });
      lease.on('state', (s: LeaseSnapshot) => {
        const fields = { state: s.state, worker: s.worker, leaseId: s.leaseId, detail: s.message };
        if (s.state === 'alive' || s.state === 'released') logger.info(fields, `lease: ${s.state}`);
        else logger.warn(fields, `lease: ${s.state}`);
      });
      return report;
    },
    async shutdown(reason) {
      if (stopping) {
        logger.warn({ signal: reason }, 'second signal while shutting down: still shutting down');
        return undefined;
      }
      stopping = true;
      const t0 = performance.now();
      // docs/design.md §5 shutdown: stop taking requests (readiness false, every mint refused with UNAVAILABLE
      // `draining`), finish in-flight requests (bounded), deregister, final `last-ms` released, revoke.
      phase = 'draining';
      guard.drain();
      bootAbort.abort(new Error(`shutting down on ${reason}`));
      logger.info({ signal: reason, inFlight: port.inFlight() }, 'shutting down: draining');
      const left = await port.close(Math.max(100, Math.floor(shutdownTimeoutMs / 2)));
      if (left > 0) logger.warn({ cancelled: left }, 'shutdown: cancelled requests still in flight at the bound');
      const released = await withTimeout(lease.release(), Math.max(100, shutdownTimeoutMs - (performance.now() - t0)));
      if (released !== 'ok') {
        logger.error(
          { err: released === 'timeout' ? undefined : released.error, timedOut: released === 'timeout' },
          'shutdown: lease release incomplete; the slot will expire in etcd and its next holder waits out the floor',
        );
      }
      timeSource.stop();
      readinessLog.stop();
      leaseTrouble.stop();
      guard.close();
      return { released: released === 'ok' };
    },
  };
}

/** Readiness reasons every node passes through when it starts or stops (readiness.ts): logged at info. */
const NORMAL_COURSE: ReadonlySet<string> = new Set(['starting', 'waiting-for-floor', 'draining']);

const SILENT: ServingLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

async function withTimeout(p: Promise<void>, ms: number): Promise<'ok' | 'timeout' | { error: unknown }> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), ms);
  });
  try {
    return await Promise.race([
      p.then(
        () => 'ok' as const,
        (error: unknown) => ({ error }),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
