/**
 * `idgen-server`: the generator node's composition root (docs/design.md §5, §6). It parses configuration, wires
 * the packages together, boots, serves, and shuts down. No minting or lease logic lives here.
 */
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import pino, { type Logger } from 'pino';
import { createGuardedMinter, createTimeSourceCheck } from '@idgen/clock-guard';
import { createEtcdLease, createFileTenureWitness, createStandaloneLease, isLeaseError } from '@idgen/lease';
import { createIdgenNode, formatHostPort } from '@idgen/serving';
import { readBuildInfo } from './build-info.js';
import { parseConfig, type ServerConfig } from './config.js';
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

/** What a failed `listen` means for the operator, in words; `undefined` for anything but a socket error. */
function listenProblem(e: unknown): string | undefined {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  switch (code) {
    case 'EADDRINUSE':
      return 'the address is already in use (EADDRINUSE): another process listens there; stop it or choose another port';
    case 'EACCES':
      return 'permission denied (EACCES): a port below 1024 needs privileges; choose a port of 1024 or above';
    case 'EADDRNOTAVAIL':
      return 'this host has no such address (EADDRNOTAVAIL): listen on one of its addresses, or 0.0.0.0';
    default:
      return undefined;
  }
}

type Exit = (code: number, why: string, fields?: Record<string, unknown>) => never;
type ServerMetrics = ReturnType<typeof createServerMetrics>;
type IdgenNode = ReturnType<typeof createIdgenNode>;
type BuildInfo = ReturnType<typeof readBuildInfo>;

/** The node's JSON logger: the level by name (`"level":"info"`, not pino's 30: the name is what pipelines match on). */
function createLogger(config: ServerConfig): Logger {
  return pino({
    level: config.logLevel,
    base: { service: 'idgen-server', nodeId: config.nodeId, region: config.region },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}

/** The one way out: a last line (fatal unless code 0), flushed, then the exit code. */
function exitWith(logger: Logger): Exit {
  return (code, why, fields = {}) => {
    logger[code === 0 ? 'info' : 'fatal']({ exitCode: code, ...fields }, why);
    logger.flush();
    process.exit(code);
  };
}

/** The metrics SDK and its exporters, with every OTEL_* variable this node ignores said once, never dropped. */
function createMetrics(config: ServerConfig, build: BuildInfo, logger: Logger): ServerMetrics {
  const { telemetry } = config;
  for (const variable of telemetry.ignored)
    logger.warn({ variable }, `${variable} is not honoured by idgen-server: ignored`);
  const metrics = createServerMetrics({
    serviceVersion: build.version,
    instanceId: config.nodeId,
    region: config.region,
    commit: build.commit,
    telemetry,
    onSdkError: (message) => logger.warn({ component: 'opentelemetry' }, `metrics export: ${message}`),
  });
  if (telemetry.otlp !== undefined)
    logger.info(
      { otlp: telemetry.otlp.url, intervalMs: telemetry.otlp.intervalMs, serviceName: telemetry.serviceName },
      'metrics exporting over OTLP',
    );
  return metrics;
}

/** The etcd lease (with the tenure journal when one is configured), or the standalone one, said loudly. */
function createLease(
  config: ServerConfig,
  guard: ReturnType<typeof createGuardedMinter>,
  metrics: ServerMetrics,
  logger: Logger,
): ReturnType<typeof createEtcdLease> | ReturnType<typeof createStandaloneLease> {
  const { etcd, standalone } = config.lease;
  if (standalone !== undefined) {
    logger.warn(
      { mode: 'standalone', stateFile: standalone.stateFile },
      'STANDALONE MODE (--standalone): worker slots are leased from an in-process store. ' +
        'This is a single-node development mode: two such nodes in one region WILL mint duplicate IDs. ' +
        'Production runs with --etcd.',
    );
  }
  if (etcd === undefined) return createStandaloneLease(standalone, guard);
  return createEtcdLease(
    {
      ...etcd,
      meter: metrics.meter('@idgen/lease'),
      logger: logger.child({ component: 'lease' }),
      ...(config.tenureJournal === undefined
        ? {}
        : {
            tenureWitness: createFileTenureWitness(config.tenureJournal, (e) =>
              logger.warn({ err: String(e) }, 'lease: the tenure journal could not be written'),
            ),
          }),
    },
    guard,
  );
}

/** What the node and its parts need to start: what `run` composed. */
interface Started {
  readonly config: ServerConfig;
  readonly idgenNode: IdgenNode;
  readonly metrics: ServerMetrics;
  readonly build: BuildInfo;
  readonly logger: Logger;
  readonly exit: Exit;
}

/**
 * Listens (the serving port, then metrics), boots the node and logs `ready` with its timings; a socket error or a
 * refused boot ends the process with one line (docs/design.md §5, §7).
 */
async function start({ config, idgenNode, metrics, build, logger, exit }: Started): Promise<void> {
  const t0 = performance.now();
  const orExit = <T>(step: Promise<T>, why: string): Promise<T> =>
    step.catch((e: unknown) => {
      // A socket error (the port in use, a privileged port, an address this host does not have) is the
      // operator's to fix: one line naming it, no stack.
      const listen = listenProblem(e);
      return listen === undefined
        ? exit(EXIT_FATAL, why, { err: e })
        : exit(EXIT_FATAL, `${why}: ${listen}`, { code: (e as NodeJS.ErrnoException).code });
    });
  const addresses = await orExit(idgenNode.listen(), `cannot listen on ${formatHostPort(config.node.listen)}`);
  const probe = (method: string | undefined, path: string) => idgenNode.port.probe(method, path);
  const metricsAddress =
    config.metricsListen === undefined
      ? undefined
      : await orExit(
          metrics.listen(config.metricsListen, probe),
          `cannot listen for metrics on ${formatHostPort(config.metricsListen)}`,
        );
  if (metricsAddress !== undefined) logger.info({ metrics: `http://${metricsAddress}/metrics` }, 'metrics listening');
  let report;
  try {
    report = await idgenNode.start();
  } catch (e) {
    // docs/design.md §5, §7: an etcd bound to another code (or never bound), a region code this etcd lent out, or a
    // spare it never adopted, is the operator's to fix; so is a record a later release wrote (a newer schema), and a
    // lease TTL above the deployment's pinned ceiling (the lease's only `config` refusal after parsing, §5).
    if (
      isLeaseError(e) &&
      (e.code === 'spare-code' || e.code === 'region-binding' || e.code === 'record-schema' || e.code === 'config')
    )
      return exit(EXIT_REGION_REFUSED, e.message);
    return exit(EXIT_FATAL, 'boot failed', { err: e });
  }
  if (report === undefined) return;
  const { worker, leaseId, mode } = report.lease;
  const timing = {
    bootMs: report.bootMs,
    sinceProcessStartMs: Math.round(performance.now()),
    startMs: Math.round(performance.now() - t0),
  };
  logger.info(
    {
      worker,
      leaseId,
      mode,
      ...addresses,
      metrics: metricsAddress,
      version: build.version,
      commit: build.commit,
      ...timing,
      steps: report.steps,
    },
    'ready',
  );
}

function run(config: ServerConfig, env: Readonly<Record<string, string | undefined>>): void {
  tuneGarbageCollector();
  const logger = createLogger(config);
  const exit = exitWith(logger);
  process.on('uncaughtException', (e) => exit(EXIT_FATAL, 'uncaught exception', { err: e }));
  process.on('unhandledRejection', (e) => exit(EXIT_FATAL, 'unhandled rejection', { err: e }));

  // What this node runs, once (GetStatus and target_info): the package beside dist/, IDGEN_COMMIT or its checkout.
  const build = readBuildInfo(env, join(__dirname, '..'));
  if (build.problem !== undefined) logger.warn({ variable: 'IDGEN_COMMIT' }, build.problem);
  const metrics = createMetrics(config, build, logger);
  const guard = createGuardedMinter({ ...config.guard, meter: metrics.meter('@idgen/clock-guard') });
  const lease = createLease(config, guard, metrics, logger);
  const timeSource = createTimeSourceCheck({
    ...config.timeSource,
    guard,
    logger: logger.child({ component: 'time-source' }),
  });
  // The lease, guard, mint scheduler, serving port, readiness and shutdown order: @idgen/serving's createIdgenNode.
  const { tls, ...node } = config.node;
  const idgenNode = createIdgenNode({
    ...node,
    ...(tls === undefined ? {} : { tls }),
    build: { version: build.version, commit: build.commit },
    guard,
    lease,
    timeSource,
    metrics,
    logger,
  });
  // The certificate-expiry gauge reads what the serving port loaded and reloads (no second reader of the files).
  if (tls !== undefined) metrics.observeCertificates(() => idgenNode.port.certificates());

  const shutdown = async (signal: string): Promise<void> => {
    const t0 = performance.now();
    const stopped = await idgenNode.shutdown(signal);
    if (stopped === undefined) return;
    await metrics.close();
    exit(0, 'stopped', { signal, shutdownMs: Math.round(performance.now() - t0), released: stopped.released });
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  // A clock fence past its bound: exit non-zero so the orchestrator restarts the node on a fresh lease
  // (docs/design.md §4). No release: the lease expires and the next holder waits out last-ms + TTL.
  guard.on('fatal', (reason) => exit(EXIT_FATAL, 'fatal clock condition', { reason }));

  void start({ config, idgenNode, metrics, build, logger, exit });
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
  run(outcome.config, env);
}

if (require.main === module) main(process.argv.slice(2), process.env);
