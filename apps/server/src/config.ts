import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { DEFAULT_LAYOUT, type Layout } from '@idgen/core';
import {
  DEFAULT_PREFIX,
  ETCD_FLAGS,
  LeaseConfigError,
  checkPrefix,
  defaultNodeId,
  etcdConnectionFromFlags,
  resolveLeaseConfig,
  type EtcdLeaseOptions,
  type NamedValue,
  type StandaloneLeaseOptions,
} from '@idgen/lease';
import type { GuardedMinterOptions, TimeSourceCheckOptions } from '@idgen/clock-guard';
import {
  SERVING_LIMITS,
  TlsMaterialError,
  formatHostPort,
  tlsFilesFromFlags,
  parseHostPort,
  type HostPort,
  type IdgenNodeOptions,
  type ServingLimit,
  type ServingLimits,
  type TlsFiles,
} from '@idgen/serving';

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
  readonly guard: Pick<GuardedMinterOptions, 'region' | 'maxRollbackMs' | 'maxFenceMs'>;
  readonly timeSource: Pick<TimeSourceCheckOptions, 'mode' | 'maxOffsetMs'>;
  /** The serving port and node: listen, TLS, advertise, limits, status details, HTTP/2 implementation. */
  readonly node: Omit<IdgenNodeOptions, 'guard' | 'lease' | 'timeSource' | 'metrics' | 'logger'> &
    ServingLimits & { readonly tls: TlsFiles | undefined; readonly advertise: string | undefined };
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

/** A bad configuration value: the message is the one line printed on stderr. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly code = 'config';
}

interface FlagSpec {
  /** Commander's flag syntax, e.g. `--region <code>`. */
  readonly flags: string;
  /** Key in commander's opts(): the flag's name in camelCase. */
  readonly key: string;
  /** `IDGEN_` and the flag's name in capitals. */
  readonly env: string;
  readonly description: string;
  /** Default as shown in --help; undefined: no default. */
  readonly defaultValue?: string;
  readonly defaultDescription?: string;
  /** An integer flag checked with the others after the named ones (`validate`), within this range. */
  readonly int?: readonly [number, number];
}

/** `--etcd-ca <file>` → `etcdCa`: the flag's key in commander's opts(). */
function camelCase(flags: string): string {
  return (flags.split(' ')[0]?.slice(2) ?? '').replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** A flag: key and variable follow from its name. */
function flag(
  flags: string,
  description: string,
  defaults: { value?: string; description?: string; int?: readonly [number, number] } = {},
): FlagSpec {
  const name = flags.split(' ')[0]?.slice(2) ?? '';
  return {
    flags,
    key: camelCase(flags),
    env: `IDGEN_${name.toUpperCase().replace(/-/g, '_')}`,
    description,
    ...(defaults.value === undefined ? {} : { defaultValue: defaults.value }),
    ...(defaults.description === undefined ? {} : { defaultDescription: defaults.description }),
    ...(defaults.int === undefined ? {} : { int: defaults.int }),
  };
}

/** Every flag, each also an `IDGEN_*` environment variable (docs/design.md §6). The command line wins over the environment. */
export const FLAGS: readonly FlagSpec[] = [
  flag('--region <code>', `region code this node mints for, 0-${DEFAULT_LAYOUT.maxRegion}; required with --etcd`, {
    description: '0 in standalone mode',
  }),
  flag('--etcd <urls>', 'comma-separated etcd client URLs (http://host:port); required unless --standalone'),
  flag(
    '--standalone',
    'one node, no etcd, for development only: worker slots from an in-process store (a second node WILL mint duplicates); ' +
      'the environment variable takes 1 or 0',
  ),
  flag(
    '--state-file <path>',
    'standalone only: where the node keeps its last millisecond across restarts (locked while it runs)',
    {
      description: `${join(tmpdir(), 'idgen-standalone-region-<region>.json')}`,
    },
  ),
  ...ETCD_FLAGS.map((f) => flag(f.flags, f.description, 'defaultValue' in f ? { value: f.defaultValue } : {})),
  flag(
    '--listen <host:port>',
    'serving address: Connect, gRPC, gRPC-Web (HTTP/1.1 and h2c), /healthz, /readyz; port 0 picks a free port',
    { value: '127.0.0.1:8080' },
  ),
  flag(
    '--tls-cert <file>',
    'PEM certificate for TLS on the serving port (with --tls-key); absent: plaintext h2c and HTTP/1.1',
  ),
  flag('--tls-key <file>', 'PEM private key of --tls-cert'),
  flag('--tls-client-ca <file>', 'mTLS: clients must present a certificate this CA signed'),
  flag(
    '--tls-client-names <names>',
    'mTLS: comma-separated names (certificate CN or DNS SAN) allowed to call; absent: any certificate the CA signed',
  ),
  flag(
    '--status-details <mode>',
    'GetStatus details (lease id, fence deadline, floor, last minted ms): full, redacted, or auto (full only with --tls-client-ca, ' +
      'where every caller holds an allowed certificate; set full behind a mesh sidecar that authenticates callers)',
    { value: 'auto' },
  ),
  flag('--advertise <host:port>', 'address callers should dial, registered in discovery', {
    description: 'the bound --listen address',
  }),
  flag('--metrics-listen <host:port>', 'Prometheus /metrics address; "off" or empty turns it off', {
    value: '127.0.0.1:9464',
  }),
  // The nodes' share of a region's slots; embedded callers default to 18-127 (docs/design.md §7).
  flag('--workers <from-to>', 'the worker slots this node may claim, inclusive (e.g. 0-15, or 7 for one slot)', {
    value: '0-17',
  }),
  flag('--lease-ttl <seconds>', 'etcd lease TTL in seconds, 2-60', { value: '6' }),
  flag(
    '--fence-margin-ms <ms>',
    'stop minting this long before the lease TTL runs out since the last acknowledged keep-alive',
    { value: '1000' },
  ),
  flag('--time-source <mode>', 'chrony (read `chronyc -c tracking`) or none (no check: development only)', {
    value: 'chrony',
  }),
  flag('--max-clock-offset-ms <ms>', 'largest |offset| from the time source before the node fences', {
    value: '10',
    int: [1, 1000],
  }),
  flag('--max-rollback-ms <ms>', 'clock rollbacks up to this are waited out; larger ones fence', {
    value: '10',
    int: [0, 1000],
  }),
  flag(
    '--max-fence-ms <ms>',
    'a clock fence longer than this exits the process (code 1) for a restart on a fresh lease',
    { value: '30000', int: [1000, 3_600_000] },
  ),
  flag('--node-id <id>', "this node's id in etcd ([A-Za-z0-9._:-], 1-128 characters)", {
    description: '<hostname>-<pid>-<random>',
  }),
  flag('--log-level <level>', LOG_LEVELS.join('|'), { value: 'info' }),
  // The serving layer's limits, its defaults and bounds (@idgen/serving).
  ...Object.entries(SERVING_LIMITS).map(([key, limit]: [string, ServingLimit]) =>
    flag(`--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} <${limit.unit}>`, limit.description, {
      value: String(limit.default),
      int: [limit.min, limit.max],
    }),
  ),
  flag(
    '--http2-server <impl>',
    'HTTP/2 (h2c) implementation: idgen (@idgen/h2, no GC pauses from headers) or node (node:http2, the fallback)',
    { value: 'idgen' },
  ),
];

function buildCommand(): Command {
  const command = new Command('idgen-server')
    .description(
      'The idgen generator node: leases a worker slot in etcd and serves unique 64-bit IDs over Connect, gRPC and gRPC-Web.\n' +
        'Every flag can also be set by the environment variable named in brackets; the command line wins.',
    )
    .helpOption('-h, --help', 'print this help and exit')
    .allowExcessArguments(false)
    .configureHelp({ helpWidth: 120 })
    .exitOverride()
    // Errors are printed by parseConfig as one line; help goes to stdout.
    .configureOutput({ writeOut: () => undefined, writeErr: () => undefined, outputError: () => undefined });
  for (const f of FLAGS) {
    // Flags without a fixed default say what happens without them; commander prints only real defaults.
    const fallback = f.defaultDescription !== undefined ? ` (default: ${f.defaultDescription})` : '';
    const option = new Option(f.flags, `${f.description} [${f.env}]${fallback}`);
    if (f.defaultValue !== undefined) option.default(f.defaultValue);
    command.addOption(option);
  }
  return command;
}

/** The `--help` text. */
export function helpText(): string {
  return buildCommand().helpInformation();
}

/**
 * Parses and validates the command line and environment, before any I/O (docs/design.md §5 boot step 1).
 * A bad value gives `{kind: 'exit', code: 2}` with one line for stderr; `--help` gives code 0 and the help.
 */
export function parseConfig(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  layout: Layout = DEFAULT_LAYOUT,
): ConfigOutcome {
  const command = buildCommand();
  try {
    command.parse([...argv], { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.help') {
        return { kind: 'exit', code: 0, stdout: command.helpInformation(), stderr: '' };
      }
      return {
        kind: 'exit',
        code: CONFIG_ERROR_EXIT_CODE,
        stdout: '',
        stderr: errorLine(e.message.replace(/^error: /, '')),
      };
    }
    throw e;
  }
  const opts = command.opts<Record<string, string | boolean | undefined>>();
  // The command line wins; an environment variable fills a flag not given on it (docs/design.md §6).
  const raw = new Map<string, { value: string | undefined; from: string }>();
  for (const f of FLAGS) {
    const fromCli = command.getOptionValueSource(f.key) === 'cli';
    const envValue = env[f.env];
    if (!fromCli && envValue !== undefined && (envValue !== '' || f.key === 'metricsListen')) {
      raw.set(f.key, { value: envValue, from: f.env });
    } else {
      const v = opts[f.key];
      raw.set(f.key, { value: v === true ? '1' : v === false ? undefined : v, from: flagName(f) });
    }
  }
  try {
    return { kind: 'config', config: validate(raw, layout) };
  } catch (e) {
    if (e instanceof ConfigError)
      return { kind: 'exit', code: CONFIG_ERROR_EXIT_CODE, stdout: '', stderr: errorLine(e.message) };
    throw e;
  }
}

function errorLine(message: string): string {
  return `idgen-server: ${message.replace(/\s*\n\s*/g, ' ').trim()} (see --help)\n`;
}

function flagName(f: FlagSpec): string {
  return f.flags.split(' ')[0] ?? f.key;
}

type Raw = Map<string, { value: string | undefined; from: string }>;

function validate(raw: Raw, layout: Layout): ServerConfig {
  const get = (key: string): { value: string | undefined; from: string } =>
    raw.get(key) ?? { value: undefined, from: key };
  const named = (key: string): NamedValue | undefined => {
    const { value, from } = get(key);
    return value === undefined ? undefined : { value, name: from };
  };
  const integer = (key: string, min: number, max: number): number => {
    const { value, from } = get(key);
    if (value === undefined || !/^\d+$/.test(value.trim())) {
      throw new ConfigError(`${from} must be an integer from ${min} to ${max}, got ${JSON.stringify(value ?? '')}`);
    }
    const n = Number(value.trim());
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      throw new ConfigError(`${from} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
    }
    return n;
  };

  const etcdRaw = get('etcd');

  // Standalone is asked for by name (docs/design.md §8.5): a production manifest that lost IDGEN_ETCD must not start
  // a node that mints from an in-process store.
  const standaloneRaw = get('standalone');
  const sv = standaloneRaw.value?.trim().toLowerCase();
  if (sv !== undefined && !['1', '0', 'true', 'false'].includes(sv)) {
    throw new ConfigError(`${standaloneRaw.from} must be 1 or 0, got ${JSON.stringify(standaloneRaw.value)}`);
  }
  const standalone = sv === '1' || sv === 'true';
  if (etcdRaw.value === undefined && !standalone) {
    throw new ConfigError('give --etcd <urls> (production) or --standalone (one node, no etcd, development only)');
  }
  if (etcdRaw.value !== undefined && standalone) {
    throw new ConfigError('give either --etcd or --standalone, not both');
  }
  const stateRaw = get('stateFile');
  if (stateRaw.value !== undefined && !standalone) {
    throw new ConfigError(`${stateRaw.from} applies only with --standalone (with etcd, last-ms lives in etcd)`);
  }
  if (stateRaw.value !== undefined && stateRaw.value.trim() === '') {
    throw new ConfigError(`${stateRaw.from} must be a file path`);
  }

  // With etcd a region code is required: two regions that both defaulted to 0 would mint the same IDs
  // on the same worker numbers (docs/design.md §1: the region code is what keeps regions apart).
  const regionRaw = get('region');
  if (regionRaw.value === undefined && etcdRaw.value !== undefined) {
    throw new ConfigError(`--region is required with --etcd (a region code 0-${layout.maxRegion})`);
  }
  const region = regionRaw.value === undefined ? 0 : integer('region', 0, layout.maxRegion);

  const etcdFlag = named('etcd');
  const etcd =
    etcdFlag === undefined
      ? undefined
      : checked(() =>
          etcdConnectionFromFlags({
            etcd: etcdFlag,
            prefix: named('etcdPrefix'),
            ca: named('etcdCa'),
            cert: named('etcdCert'),
            key: named('etcdKey'),
            user: named('etcdUser'),
            passwordFile: named('etcdPasswordFile'),
          }),
        );
  if (etcd === undefined) {
    // The prefix has a default and may come from a shared environment: checked, then unused, in standalone mode.
    const prefix = get('etcdPrefix');
    const prefixProblem = checkPrefix(prefix.value ?? DEFAULT_PREFIX);
    if (prefixProblem !== undefined) throw new ConfigError(`${prefix.from}: ${prefixProblem}`);
    const stray = ETCD_FLAGS.filter((f) => !f.flags.startsWith('--etcd-prefix '))
      .map((f) => get(camelCase(f.flags)))
      .find((r) => r.value !== undefined);
    if (stray !== undefined) throw new ConfigError(`${stray.from} applies only with --etcd`);
  }

  const listenRaw = get('listen');
  const listen = hostPortFlag(listenRaw.value ?? '', listenRaw.from, true);
  // The etcd flags beside --etcd are @idgen/lease's (shared with the idgen CLI), the TLS flags @idgen/serving's.
  const tls = checked(() =>
    tlsFilesFromFlags({
      cert: named('tlsCert'),
      key: named('tlsKey'),
      clientCa: named('tlsClientCa'),
      clientNames: named('tlsClientNames'),
    }),
  );

  const advertiseRaw = get('advertise');
  let advertise: string | undefined;
  if (advertiseRaw.value !== undefined) {
    const hp = hostPortFlag(advertiseRaw.value, advertiseRaw.from, false);
    advertise = formatHostPort(hp);
  }
  const metricsRaw = get('metricsListen');
  const metricsValue = (metricsRaw.value ?? '').trim();
  const metricsListen =
    metricsValue === '' || metricsValue === 'off' ? undefined : hostPortFlag(metricsValue, metricsRaw.from, true);
  if (
    metricsListen !== undefined &&
    metricsListen.port !== 0 &&
    metricsListen.port === listen.port &&
    metricsListen.host === listen.host
  ) {
    throw new ConfigError(`${metricsRaw.from} must differ from --listen (${formatHostPort(listen)})`);
  }

  const workersRaw = get('workers');
  const workerRange = parseWorkers(workersRaw.value ?? '', workersRaw.from, layout.maxWorker);

  const leaseTtlSeconds = integer('leaseTtl', 2, 60);
  const fenceMarginMs = integer('fenceMarginMs', 100, 59_000);
  if (fenceMarginMs >= leaseTtlSeconds * 1000) {
    throw new ConfigError(
      `${get('fenceMarginMs').from} (${fenceMarginMs}) must be below the lease TTL (${leaseTtlSeconds * 1000} ms)`,
    );
  }

  const oneOf = <T extends string>(key: string, values: readonly T[]): T => {
    const { value, from } = get(key);
    const found = values.find((v) => v === value);
    if (found === undefined)
      throw new ConfigError(`${from} must be one of ${values.join(', ')}, got ${JSON.stringify(value ?? '')}`);
    return found;
  };
  const timeSource = oneOf('timeSource', ['chrony', 'none']);
  const logLevel = oneOf('logLevel', LOG_LEVELS);
  const http2Server = oneOf('http2Server', ['idgen', 'node']);
  const detailsValue = oneOf('statusDetails', ['auto', 'full', 'redacted']);
  const statusDetails =
    detailsValue === 'auto' ? (tls?.clientCaFile !== undefined ? 'full' : 'redacted') : detailsValue;

  const nodeRaw = get('nodeId');
  const nodeId = nodeRaw.value ?? defaultNodeId();
  if (!/^[A-Za-z0-9._:-]{1,128}$/.test(nodeId)) {
    throw new ConfigError(`${nodeRaw.from} must be 1-128 characters of [A-Za-z0-9._:-], got ${JSON.stringify(nodeId)}`);
  }

  // The integer flags with a range in FLAGS, in its order (a bad one names itself: the first found is the error).
  const ints: Record<string, number> = {};
  for (const f of FLAGS) if (f.int !== undefined) ints[f.key] = integer(f.key, f.int[0], f.int[1]);
  const limits = ints as Pick<ServingLimits, keyof ServingLimits>;
  const workers = { first: workerRange.from, last: workerRange.to };
  const config: ServerConfig = {
    region,
    nodeId,
    logLevel,
    metricsListen,
    lease:
      etcd === undefined
        ? {
            standalone: {
              region,
              workers,
              nodeId,
              stateFile: stateRaw.value ?? join(tmpdir(), `idgen-standalone-region-${region}.json`),
            },
          }
        : {
            etcd: {
              ...etcd,
              region,
              workers,
              nodeId,
              ttlSeconds: leaseTtlSeconds,
              fenceMarginMs,
              // A node that finds every slot held is a spare: it waits, not ready, until one frees up (issue 7).
              waitForFreeSlot: true,
              layout,
            },
          },
    guard: { region, maxRollbackMs: ints['maxRollbackMs'] ?? 0, maxFenceMs: ints['maxFenceMs'] ?? 0 },
    timeSource: { mode: timeSource, maxOffsetMs: ints['maxClockOffsetMs'] ?? 0 },
    node: {
      ...limits,
      listen,
      tls,
      advertise,
      region,
      slots: workers.last - workers.first + 1,
      timeSourceMode: timeSource,
      statusDetails,
      http2Server,
    },
  };
  // The lease checks how its numbers fit together (TTL, margin, keep-alive): ask it now, before any I/O,
  // so a bad combination is a configuration error (exit 2), not a crash at start-up.
  if (config.lease.etcd !== undefined) {
    try {
      resolveLeaseConfig(config.lease.etcd);
    } catch (e) {
      if (e instanceof LeaseConfigError) {
        throw new ConfigError(
          `lease settings (--etcd, --etcd-prefix, --etcd-ca/-cert/-key, --etcd-user, --workers, --lease-ttl, --fence-margin-ms) do not fit: ${e.problems.join('; ')}`,
        );
      }
      throw e;
    }
  }
  return config;
}

/** A package's check of flag values, its error (which names the flag) as a configuration error. */
function checked<T>(check: () => T): T {
  try {
    return check();
  } catch (e) {
    if (e instanceof LeaseConfigError) throw new ConfigError(e.problems.join('; '));
    if (e instanceof TlsMaterialError) throw new ConfigError(e.message);
    throw e;
  }
}

/** `host:port` from a flag (IPv6 as `[::1]:port`); the port 1-65535, or 0 when `allowZero`. */
export function hostPortFlag(value: string, from: string, allowZero: boolean): HostPort {
  const hp = parseHostPort(value, allowZero);
  if (hp === undefined)
    throw new ConfigError(
      `${from} must be host:port with a port from ${allowZero ? 0 : 1} to 65535, got ${JSON.stringify(value)}`,
    );
  return hp;
}

function parseWorkers(value: string, from: string, maxWorker: number): { from: number; to: number } {
  const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(value.trim());
  const lo = m === null ? NaN : Number(m[1]);
  const hi = m === null ? NaN : Number(m[2] ?? m[1]);
  if (m === null || !(lo >= 0 && hi <= maxWorker && lo <= hi)) {
    throw new ConfigError(
      `${from} must be a range from-to within 0-${maxWorker} (from <= to), got ${JSON.stringify(value)}`,
    );
  }
  return { from: lo, to: hi };
}
