/**
 * `idgen-server`: the generator node's composition root (docs/design.md §5, §6). It parses configuration, wires
 * the packages together, boots, serves, and shuts down. No minting or lease logic lives here.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import pino, { type Logger } from 'pino';
import { createGuardedMinter, createMintScheduler, createTimeSourceCheck, type GuardStatus } from '@idgen/clock-guard';
import { createEtcdLease, createStandaloneLease, isLeaseError, type LeaseSnapshot, type WorkerLease } from '@idgen/lease';
import {
  READINESS_REASONS,
  createLeaseTroubleTracker,
  createServingPort,
  describeReadiness,
  formatHostPort,
  judgeReadiness,
  watchReadiness,
  type Phase,
  type Readiness,
} from '@idgen/serving';
import { boot } from './boot.js';
import { etcdLeaseOptions, parseConfig, type ServerConfig } from './config.js';
import { createServerMetrics } from './metrics.js';

/**
 * Exit codes: 0 clean stop, 1 fatal (clock fence past its bound, boot refused, crash), 2 bad configuration, or a
 * region code etcd refuses (lent out, or a spare never adopted: docs/design.md §7).
 */
export const EXIT_FATAL = 1;
export const EXIT_REGION_REFUSED = 2;

/**
 * V8's allocation-site pretenuring off, for this process, before it serves. With it on (the default), V8
 * watches which allocation sites' objects survive scavenges, and once a site's survive often (a burst of
 * requests in flight at a scavenge is enough) it allocates all of that site's objects in old space from then
 * on: every request's stream, body and closures became old garbage only Mark-Compacts free. Measured with
 * `--trace-gc` at 16,000 NextIds/s (gRPC, Poisson): ~0.7 MB promoted per scavenge, scavenges of 1-2.4 ms,
 * p99 2.6 ms; with it off, nothing promoted, scavenges of 0.4-0.7 ms, one Mark-Compact in 12 s, p99 0.25 ms.
 * The flag is read by the collector as it runs, so setting it here (not on node's command line) takes effect
 * for however the node is started.
 */
export function tuneGarbageCollector(): void {
  setFlagsFromString('--no-allocation-site-pretenuring');
}

function run(config: ServerConfig): void {
  tuneGarbageCollector();
  const logger: Logger = pino({
    level: config.logLevel,
    base: { service: 'idgen-server', nodeId: config.nodeId, region: config.region },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
  const exit = (code: number, why: string, fields: Record<string, unknown> = {}): never => {
    if (code === 0) logger.info({ exitCode: code, ...fields }, why);
    else logger.fatal({ exitCode: code, ...fields }, why);
    logger.flush();
    process.exit(code);
  };
  process.on('uncaughtException', (e) => exit(EXIT_FATAL, 'uncaught exception', { err: e }));
  process.on('unhandledRejection', (e) => exit(EXIT_FATAL, 'unhandled rejection', { err: e }));

  const metrics = createServerMetrics({ serviceVersion: packageVersion(), instanceId: config.nodeId });
  const guard = createGuardedMinter({
    region: config.region,
    maxRollbackMs: config.maxRollbackMs,
    maxFenceMs: config.maxFenceMs,
    meter: metrics.meter('@idgen/clock-guard'),
  });
  const leaseLogger = logger.child({ component: 'lease' });
  const workers = { first: config.workers.from, last: config.workers.to };
  let lease: WorkerLease;
  const etcdOptions = etcdLeaseOptions(config);
  if (etcdOptions !== undefined) {
    lease = createEtcdLease({ ...etcdOptions, meter: metrics.meter('@idgen/lease'), logger: leaseLogger }, guard);
  } else {
    const stateFile = config.standalone?.stateFile ?? '';
    logger.warn(
      { mode: 'standalone', stateFile },
      'STANDALONE MODE (--standalone): worker slots are leased from an in-process store. ' +
        'This is a single-node development mode: two such nodes in one region WILL mint duplicate IDs. ' +
        'Production runs with --etcd.',
    );
    lease = createStandaloneLease({ region: config.region, workers, nodeId: config.nodeId, stateFile }, guard);
  }
  const timeSource = createTimeSourceCheck({
    mode: config.timeSource,
    guard,
    maxOffsetMs: config.maxClockOffsetMs,
    logger: logger.child({ component: 'time-source' }),
  });

  let phase: Phase = 'starting';
  let advertise = config.advertise ?? formatHostPort(config.listen);
  // Readiness and why, judged in one place (@idgen/serving's judgeReadiness) for /readyz, Health/Check, GetStatus and the log.
  const leaseTrouble = createLeaseTroubleTracker(lease);
  const readiness = (): Readiness =>
    judgeReadiness({
      phase,
      canMint: guard.canMint(),
      guard: guard.status(),
      timeSourceMode: config.timeSource,
      timeSource: timeSource.last(),
      lease: lease.snapshot(),
      leaseTrouble: leaseTrouble.current(),
      nowMs: Date.now(),
    });
  // One scheduler for every path that mints: requests that need a later millisecond wait on a timer, fairly
  // between connections, never spinning on the loop the lease's keep-alives run on (issue 13).
  const server = createServingPort({
    guard,
    mints: createMintScheduler(guard),
    lease: () => lease.snapshot(),
    phase: () => phase,
    region: config.region,
    maxCount: config.maxCount,
    timeSourceMode: config.timeSource,
    advertise: () => advertise,
    statusDetails: config.statusDetails,
    readiness,
    maxBodyBytes: config.maxBodyBytes,
    requestTimeoutMs: config.requestTimeoutMs,
    maxConnections: config.maxConnections,
    prefaceTimeoutMs: config.prefaceTimeoutMs,
    idleTimeoutMs: config.idleTimeoutMs,
    stalledWriteTimeoutMs: config.stalledWriteTimeoutMs,
    http2Server: config.http2Server,
    ...(config.tls === undefined ? {} : { tls: config.tls }),
    metrics: metrics.hooks,
    logger,
  });

  metrics.observeNode(READINESS_REASONS, () => {
    const r = readiness();
    return { region: config.region, ready: r.ready, reason: r.reason, slotHeld: lease.snapshot().worker !== undefined, slots: config.workers.to - config.workers.from + 1 };
  });
  // One log line each time the reason (or its cause) changes, from the first boot step on.
  const readinessLog = watchReadiness(readiness, (r, previous) => {
    const fields = { readiness: r.reason, cause: r.cause, detail: r.detail, waitMs: r.waitMs, previous: previous?.reason };
    if (r.ready) logger.info(fields, 'readiness: ready');
    else logger.warn(fields, `readiness: not ready, ${describeReadiness(r)}`);
  });
  lease.on('state', () => readinessLog.poke());

  const bootAbort = new AbortController();
  let stopping = false;
  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) {
      logger.warn({ signal }, 'second signal while shutting down: still shutting down');
      return;
    }
    stopping = true;
    const t0 = performance.now();
    // docs/design.md §5 shutdown: stop taking requests (readiness false, every mint refused with UNAVAILABLE
    // `draining`), finish in-flight requests (bounded), deregister, final `last-ms` released, revoke.
    phase = 'draining';
    guard.drain();
    bootAbort.abort(new Error(`shutting down on ${signal}`));
    logger.info({ signal, inFlight: server.inFlight() }, 'shutting down: draining');
    const budget = config.shutdownTimeoutMs;
    const left = await server.close(Math.max(100, Math.floor(budget / 2)));
    if (left > 0) logger.warn({ cancelled: left }, 'shutdown: cancelled requests still in flight at the bound');
    const released = await withTimeout(lease.release(), Math.max(100, budget - (performance.now() - t0)));
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
    await metrics.close();
    exit(0, 'stopped', { signal, shutdownMs: Math.round(performance.now() - t0), released: released === 'ok' });
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  // A clock fence past its bound: exit non-zero so the orchestrator restarts the node on a fresh lease
  // (docs/design.md §4). No release: the lease expires and the next holder waits out last-ms + TTL.
  guard.on('fatal', (reason) => exit(EXIT_FATAL, 'fatal clock condition', { reason }));

  const start = async (): Promise<void> => {
    const t0 = performance.now();
    let bound;
    try {
      bound = await server.listen(config.listen);
    } catch (e) {
      return exit(EXIT_FATAL, `cannot listen on ${formatHostPort(config.listen)}`, { err: e });
    }
    const listen = formatHostPort(bound);
    if (config.advertise === undefined) {
      // An unspecified bind address is not dialable: advertise the host name instead.
      advertise = bound.host === '0.0.0.0' || bound.host === '::' ? formatHostPort({ host: hostname(), port: bound.port }) : listen;
    }
    lease.setAddress(advertise);
    logger.info({ listen, advertise }, 'serving port open (not ready yet)');
    let metricsAddress: string | undefined;
    if (config.metricsListen !== undefined) {
      try {
        metricsAddress = await metrics.listen(config.metricsListen);
      } catch (e) {
        return exit(EXIT_FATAL, `cannot listen for metrics on ${formatHostPort(config.metricsListen)}`, { err: e });
      }
      logger.info({ metrics: `http://${metricsAddress}/metrics` }, 'metrics listening');
    }

    let report;
    try {
      report = await boot({ timeSource, lease, logger, signal: bootAbort.signal });
    } catch (e) {
      if (stopping) return;
      // docs/design.md §7: a region code this etcd lent out, or a spare it never adopted, is the operator's to fix.
      if (isLeaseError(e) && e.code === 'spare-code') return exit(EXIT_REGION_REFUSED, e.message);
      return exit(EXIT_FATAL, 'boot failed', { err: e });
    }
    if (stopping) return;
    phase = 'running';
    guard.on('state', (s: GuardStatus) => {
      if (s.state === 'serving') logger.info({ worker: s.worker }, 'guard: serving');
      else logger.warn({ reason: s.reason, detail: s.message }, 'guard: fenced');
    });
    lease.on('state', (s: LeaseSnapshot) => {
      const fields = { state: s.state, worker: s.worker, leaseId: s.leaseId, detail: s.message };
      if (s.state === 'alive' || s.state === 'released') logger.info(fields, `lease: ${s.state}`);
      else logger.warn(fields, `lease: ${s.state}`);
    });
    logger.info(
      {
        worker: report.lease.worker,
        leaseId: report.lease.leaseId,
        mode: report.lease.mode,
        listen,
        advertise,
        metrics: metricsAddress,
        bootMs: report.bootMs,
        sinceProcessStartMs: Math.round(performance.now()),
        startMs: Math.round(performance.now() - t0),
        steps: report.steps,
      },
      'ready',
    );
  };
  void start();
}

/** This package's version (`service.version` on every series), from the package.json beside `dist/`. */
function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(join(__dirname, '..', 'package.json'), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

async function withTimeout(p: Promise<void>, ms: number): Promise<'ok' | 'timeout' | { error: unknown }> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), ms);
  });
  try {
    return await Promise.race([p.then(() => 'ok' as const, (error: unknown) => ({ error })), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Entry point: parse (exit 2 on a bad value, before any I/O: docs/design.md §5 step 1), then run. */
export function main(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): void {
  const outcome = parseConfig(argv, env);
  if (outcome.kind === 'exit') {
    if (outcome.stdout !== '') process.stdout.write(outcome.stdout);
    if (outcome.stderr !== '') process.stderr.write(outcome.stderr);
    process.exitCode = outcome.code;
    return;
  }
  run(outcome.config);
}

if (require.main === module) main(process.argv.slice(2), process.env);
