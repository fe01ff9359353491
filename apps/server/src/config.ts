import { dirname, join } from 'node:path';
import { DEFAULT_LAYOUT, type Layout } from '@idgen/core';
import {
  FlagError,
  defineFlags,
  flag,
  integer,
  matching,
  oneOf,
  refuse,
  text,
  textFlags,
  yesNo,
  type FlagDef,
  type FlagSpec,
  type FlagValues,
  type Parser,
} from '@idgen/flags';
import {
  DEFAULT_PREFIX,
  ETCD_FLAGS,
  LeaseConfigError,
  checkPrefix,
  defaultNodeId,
  defaultStandaloneStateFile,
  etcdConnectionFromFlags,
  resolveLeaseConfig,
  type EtcdLeaseOptions,
  type StandaloneLeaseOptions,
} from '@idgen/lease';
import type { GuardedMinterOptions, TimeSourceCheckOptions } from '@idgen/clock-guard';
import {
  SERVING_LIMITS,
  TLS_FLAGS,
  TlsMaterialError,
  formatHostPort,
  parseHostPort,
  tlsFilesFromFlags,
  type HostPort,
  type IdgenNodeOptions,
  type ServingLimits,
  type TlsFiles,
} from '@idgen/serving';
import { TelemetryConfigError, readTelemetryEnv, type TelemetrySettings } from './telemetry-env.js';

/**
 * The validated configuration of one generator node (docs/design.md §6), as the packages' own options: main.ts
 * hands each to its package. Each flag is in {@link FLAGS}; the serving limits' from @idgen/serving's SERVING_LIMITS.
 */
export interface ServerConfig {
  readonly region: number;
  readonly nodeId: string;
  readonly logLevel: LogLevel;
  /** `undefined` turns metrics serving off. */
  readonly metricsListen: HostPort | undefined;
  /** etcd's lease (production), or the standalone store's, asked for by name (docs/design.md §8.5). */
  readonly lease:
    | { readonly etcd: EtcdLeaseOptions; readonly standalone?: undefined }
    | { readonly etcd?: undefined; readonly standalone: StandaloneLeaseOptions };
  /** `--tenure-journal`: where the holder journals its tenures outside etcd (docs/design.md §5), if anywhere. */
  readonly tenureJournal: string | undefined;
  readonly guard: Pick<GuardedMinterOptions, 'region' | 'maxRollbackMs' | 'maxFenceMs'>;
  readonly timeSource: Pick<TimeSourceCheckOptions, 'mode' | 'maxOffsetMs'>;
  /** The serving port and node: listen, TLS, advertise, limits, status details, HTTP/2 implementation. */
  readonly node: Omit<IdgenNodeOptions, 'guard' | 'lease' | 'timeSource' | 'metrics' | 'logger'> &
    ServingLimits & { readonly tls: TlsFiles | undefined; readonly advertise: string | undefined };
  /** OpenTelemetry's `OTEL_*` variables: service name, resource attributes, exporters (telemetry-env.ts). */
  readonly telemetry: TelemetrySettings;
}

/** pino's levels. */
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** What parsing the command line ended in: a configuration, or an exit with text to print. */
export type ConfigOutcome =
  | { readonly kind: 'config'; readonly config: ServerConfig }
  | { readonly kind: 'exit'; readonly code: 0 | 2; readonly stdout: string; readonly stderr: string };

/** Exit code for a bad configuration (docs/design.md §5 boot step 1). */
export const CONFIG_ERROR_EXIT_CODE = 2;

/** `host:port` (IPv6 as `[::1]:port`); the port 1-65535, or 0 when `allowZero`. */
const hostPort =
  (allowZero: boolean): Parser<HostPort> =>
  (t, from) =>
    parseHostPort(t, allowZero) ?? refuse(from, `host:port with a port from ${allowZero ? 0 : 1} to 65535`, t);
const metricsAddress: Parser<HostPort | undefined> = (t, from) =>
  t.trim() === '' || t.trim() === 'off' ? undefined : hostPort(true)(t.trim(), from);
const workerRange =
  (maxWorker: number): Parser<{ first: number; last: number }> =>
  (t, from) => {
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(t.trim());
    const [first, last] = [Number(m?.[1]), Number(m?.[2] ?? m?.[1])];
    return first >= 0 && last <= maxWorker && first <= last
      ? { first, last }
      : refuse(from, `a range from-to within 0-${maxWorker} (from <= to)`, t);
  };
/** The serving layer's limits, with its defaults and bounds (@idgen/serving). */
const SERVING_FLAGS = Object.fromEntries(
  Object.entries(SERVING_LIMITS).map(([key, l]) => [
    key,
    flag(`<${l.unit}>`, integer(l.min, l.max), l.description, String(l.default)),
  ]),
) as { [K in keyof ServingLimits]-?: FlagDef<number> };

/** Every flag, keyed by its name in camelCase; each also an `IDGEN_*` variable (docs/design.md §6). */
function flagTable(layout: Layout) {
  return {
    region: flag(
      '<code>',
      integer(0, layout.maxRegion),
      `region code this node mints for, 0-${layout.maxRegion}; required with --etcd`,
      { shown: '0 in standalone mode' },
    ),
    etcd: flag('<urls>', text, 'comma-separated etcd client URLs (http://host:port); required unless --standalone'),
    standalone: flag(
      '',
      yesNo,
      'one node, no etcd, for development only: worker slots from an in-process store (a second node WILL mint duplicates); ' +
        'the environment variable takes 1 or 0',
    ),
    stateFile: flag(
      '<path>',
      matching(/\S/, 'a file path'),
      'standalone only: where the node keeps its last millisecond across restarts (locked while it runs)',
      { shown: join(dirname(defaultStandaloneStateFile(0)), 'standalone-region-<region>.json') },
    ),
    tenureJournal: flag(
      '<dir>',
      matching(/\S/, 'a directory path'),
      'etcd only: journal each tenure (a small file per tenure, replaced at every acknowledged last-ms) in this directory, ' +
        "a witness outside etcd that idgen audit --journal reads after a region's etcd was restored (docs/runbook.md)",
    ),
    freshState: flag(
      '',
      yesNo,
      "standalone only: start over when the state file is empty, garbled or missing after a previous run (minting above the state directory's last change + 3 s + the clock bound); the environment variable takes 1 or 0",
    ),
    ...textFlags(ETCD_FLAGS),
    listen: flag(
      '<host:port>',
      hostPort(true),
      'serving address: Connect, gRPC, gRPC-Web (HTTP/1.1 and h2c), /healthz, /readyz; port 0 picks a free port',
      '127.0.0.1:8080',
    ),
    ...textFlags(TLS_FLAGS),
    statusDetails: flag(
      '<mode>',
      oneOf('auto', 'full', 'redacted'),
      'GetStatus details (lease id, fence deadline, floor, last minted ms): full, redacted, or auto (full only with --tls-client-ca, ' +
        'where every caller holds an allowed certificate; set full behind a mesh sidecar that authenticates callers)',
      'auto',
    ),
    advertise: flag('<host:port>', hostPort(false), 'address callers should dial, registered in discovery', {
      shown: 'the bound --listen address',
    }),
    metricsListen: flag('<host:port>', metricsAddress, 'Prometheus /metrics address; "off" or empty turns it off', {
      value: '127.0.0.1:9464',
      emptyIsValue: true,
    }),
    // The nodes' share of a region's slots; embedded callers default to 18-127 (docs/design.md §7).
    workers: flag(
      '<from-to>',
      workerRange(layout.maxWorker),
      'the worker slots this node may claim, inclusive (e.g. 0-15, or 7 for one slot)',
      '0-17',
    ),
    leaseTtl: flag('<seconds>', integer(2, 60), 'etcd lease TTL in seconds, 2-60', '6'),
    fenceMarginMs: flag(
      '<ms>',
      integer(100, 59_000),
      'stop minting this long before the lease TTL runs out since the last acknowledged keep-alive',
      '1000',
    ),
    timeSource: flag(
      '<mode>',
      oneOf('chrony', 'none'),
      'chrony (read `chronyc -c tracking`) or none (no check: development only)',
      'chrony',
    ),
    maxClockOffsetMs: flag(
      '<ms>',
      integer(1, 1000),
      'largest |offset| from the time source before the node fences',
      '10',
    ),
    maxRollbackMs: flag('<ms>', integer(0, 1000), 'clock rollbacks up to this are waited out; larger ones fence', '10'),
    maxFenceMs: flag(
      '<ms>',
      integer(1000, 3_600_000),
      'a clock fence longer than this exits the process (code 1) for a restart on a fresh lease',
      '30000',
    ),
    nodeId: flag(
      '<id>',
      matching(/^[A-Za-z0-9._:-]{1,128}$/, '1-128 characters of [A-Za-z0-9._:-]'),
      "this node's id in etcd ([A-Za-z0-9._:-], 1-128 characters)",
      { shown: '<hostname>-<pid>-<random>' },
    ),
    logLevel: flag('<level>', oneOf(...LOG_LEVELS), LOG_LEVELS.join('|'), 'info'),
    ...SERVING_FLAGS,
    http2Server: flag(
      '<impl>',
      oneOf('idgen', 'node'),
      'HTTP/2 (h2c) implementation: idgen (@idgen/h2, no GC pauses from headers) or node (node:http2, the fallback)',
      'idgen',
    ),
  };
}

const INFO = {
  name: 'idgen-server',
  description:
    'The idgen generator node: leases a worker slot in etcd and serves unique 64-bit IDs over Connect, gRPC and gRPC-Web.',
  envPrefix: 'IDGEN_',
};

const SERVER_FLAGS = defineFlags(INFO, flagTable(DEFAULT_LAYOUT));

/** Every flag, for the help, the deploy files' checks and the docs. */
export const FLAGS: readonly FlagSpec[] = SERVER_FLAGS.specs;

/** The `--help` text. */
export const helpText = (): string => SERVER_FLAGS.help();

/**
 * Parses and validates the command line and environment, before any I/O (docs/design.md §5 boot step 1).
 * A bad value gives `{kind: 'exit', code: 2}` with one line for stderr; `--help` gives code 0 and the help.
 */
export function parseConfig(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  layout: Layout = DEFAULT_LAYOUT,
): ConfigOutcome {
  const table = flagTable(layout);
  const exit = (message: string): ConfigOutcome => ({
    kind: 'exit',
    code: CONFIG_ERROR_EXIT_CODE,
    stdout: '',
    stderr: `idgen-server: ${message.replace(/\s*\n\s*/g, ' ').trim()} (see --help)\n`,
  });
  const read = defineFlags(INFO, table).parse(argv, env);
  if (read.kind === 'help') return { kind: 'exit', code: 0, stdout: read.text, stderr: '' };
  if (read.kind === 'error') return exit(read.message);
  try {
    return { kind: 'config', config: { ...compose(table, read.values, layout), telemetry: readTelemetryEnv(env) } };
  } catch (e) {
    if (e instanceof FlagError) return exit(e.message);
    if (e instanceof LeaseConfigError) return exit(e.problems.join('; '));
    if (e instanceof TlsMaterialError) return exit(e.message);
    if (e instanceof TelemetryConfigError) return exit(e.message);
    throw e;
  }
}

/** The packages' options from the flags' values: the checks across flags, then each package's own. */
function compose(
  table: ReturnType<typeof flagTable>,
  values: FlagValues,
  layout: Layout,
): Omit<ServerConfig, 'telemetry'> {
  const { value, set, name, named } = values;
  // Standalone is asked for by name (docs/design.md §8.5): a production manifest that lost IDGEN_ETCD must not start
  // a node that mints from an in-process store.
  const standalone = value(table.standalone) === true;
  const etcdGiven = values.given(table.etcd);
  if (etcdGiven === undefined && !standalone)
    throw new FlagError('give --etcd <urls> (production) or --standalone (one node, no etcd, development only)');
  if (etcdGiven !== undefined && standalone) throw new FlagError('give either --etcd or --standalone, not both');
  const tenureJournal = value(table.tenureJournal);
  if (tenureJournal !== undefined && standalone)
    throw new FlagError(
      `${name(table.tenureJournal)} applies only with --etcd (a standalone node has no etcd to witness)`,
    );
  const stateFile = value(table.stateFile);
  if (stateFile !== undefined && !standalone)
    throw new FlagError(`${name(table.stateFile)} applies only with --standalone (with etcd, last-ms lives in etcd)`);
  const freshState = value(table.freshState) === true;
  if (freshState && !standalone)
    throw new FlagError(`${name(table.freshState)} applies only with --standalone (with etcd, last-ms lives in etcd)`);
  // With etcd a region code is required: two regions that both defaulted to 0 would mint the same IDs
  // on the same worker numbers (docs/design.md §1: the region code is what keeps regions apart).
  if (value(table.region) === undefined && etcdGiven !== undefined)
    throw new FlagError(`--region is required with --etcd (a region code 0-${layout.maxRegion})`);
  const region = value(table.region) ?? 0;

  // The etcd flags are @idgen/lease's (shared with the idgen CLI), the TLS flags @idgen/serving's: they check them.
  const { prefix = { value: DEFAULT_PREFIX, name: '--etcd-prefix' }, ...etcdFlags } = named(ETCD_FLAGS);
  const etcd = etcdGiven === undefined ? undefined : etcdConnectionFromFlags({ ...etcdFlags, prefix, etcd: etcdGiven });
  if (etcd === undefined) {
    // The prefix has a default and may come from a shared environment: checked, then unused, in standalone mode.
    const prefixProblem = checkPrefix(prefix.value);
    if (prefixProblem !== undefined) throw new FlagError(`${prefix.name}: ${prefixProblem}`);
    const stray = Object.values(etcdFlags)[0];
    if (stray !== undefined) throw new FlagError(`${stray.name} applies only with --etcd`);
  }
  const tls = tlsFilesFromFlags(named(TLS_FLAGS));

  const listen = set(table.listen);
  const metricsListen = value(table.metricsListen);
  // Port 0 picks a free port, never the serving port's.
  if (metricsListen?.port && formatHostPort(metricsListen) === formatHostPort(listen))
    throw new FlagError(`${name(table.metricsListen)} must differ from --listen (${formatHostPort(listen)})`);
  const ttlSeconds = set(table.leaseTtl);
  const fenceMarginMs = set(table.fenceMarginMs);
  if (fenceMarginMs >= ttlSeconds * 1000)
    throw new FlagError(
      `${name(table.fenceMarginMs)} (${fenceMarginMs}) must be below the lease TTL (${ttlSeconds * 1000} ms)`,
    );
  const timeSource = set(table.timeSource);
  const details = set(table.statusDetails);
  const nodeId = value(table.nodeId) ?? defaultNodeId();
  const workers = set(table.workers);
  const limits = Object.fromEntries(
    Object.entries(SERVING_FLAGS).map(([key, d]) => [key, set(d)]),
  ) as unknown as ServingLimits;
  const advertise = value(table.advertise);

  const config: Omit<ServerConfig, 'telemetry'> = {
    region,
    nodeId,
    logLevel: set(table.logLevel),
    metricsListen,
    tenureJournal,
    lease:
      etcd === undefined
        ? {
            standalone: {
              region,
              workers,
              nodeId,
              stateFile: stateFile ?? defaultStandaloneStateFile(region),
              ...(freshState ? { freshState } : {}),
            },
          }
        : {
            // A node that finds every slot held is a spare: it waits, not ready, until one frees up (a
            // standby that takes over a slot a failed node leaves).
            etcd: { ...etcd, region, workers, nodeId, ttlSeconds, fenceMarginMs, waitForFreeSlot: true, layout },
          },
    guard: { region, maxRollbackMs: set(table.maxRollbackMs), maxFenceMs: set(table.maxFenceMs) },
    timeSource: { mode: timeSource, maxOffsetMs: set(table.maxClockOffsetMs) },
    node: {
      ...limits,
      listen,
      tls,
      advertise: advertise === undefined ? undefined : formatHostPort(advertise),
      region,
      slots: workers.last - workers.first + 1,
      timeSourceMode: timeSource,
      statusDetails: details === 'auto' ? (tls?.clientCaFile !== undefined ? 'full' : 'redacted') : details,
      http2Server: set(table.http2Server),
    },
  };
  // The lease checks how its numbers fit together (TTL, margin, keep-alive): ask it now, before any I/O,
  // so a bad combination is a configuration error (exit 2), not a crash at start-up.
  if (config.lease.etcd !== undefined) {
    try {
      resolveLeaseConfig(config.lease.etcd);
    } catch (e) {
      if (!(e instanceof LeaseConfigError)) throw e;
      throw new FlagError(
        `lease settings (--etcd, --etcd-prefix, --etcd-ca/-cert/-key, --etcd-user, --workers, --lease-ttl, --fence-margin-ms) do not fit: ${e.problems.join('; ')}`,
      );
    }
  }
  return config;
}
