import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultStandaloneStateFile } from '@idgen/lease';
import { FLAGS, helpText, parseConfig, type ServerConfig } from '../src/config.js';

/** Without etcd, the cases below are standalone by name (the rule itself: 'standalone only by name'). */
function standaloneUnlessEtcd(argv: string[], env: Record<string, string>): string[] {
  const named = [...argv, ...Object.keys(env).map((k) => k.replace(/^IDGEN_/, '--').toLowerCase())];
  return named.includes('--etcd') || named.includes('--standalone') ? argv : ['--standalone', ...argv];
}

/**
 * The configuration in one flat record, a field per flag (the lease's connection, TTL and margin with etcd; the
 * state file standalone): the cases below compare flags with values, whichever package's options hold them.
 */
function flat(c: ServerConfig): Flat {
  const { etcd, standalone } = c.lease;
  const workers = (etcd ?? standalone).workers as { first: number; last: number };
  const { slots, region: nodeRegion, timeSourceMode, ...node } = c.node;
  expect({ slots, nodeRegion, timeSourceMode, guardRegion: c.guard.region }).toEqual({
    slots: workers.last - workers.first + 1,
    nodeRegion: c.region,
    timeSourceMode: c.timeSource.mode,
    guardRegion: c.region,
  });
  return {
    region: c.region,
    nodeId: c.nodeId,
    logLevel: c.logLevel,
    metricsListen: c.metricsListen,
    etcd:
      etcd === undefined
        ? undefined
        : {
            endpoints: etcd.endpoints,
            prefix: etcd.prefix,
            ...(etcd.tls === undefined ? {} : { tls: etcd.tls }),
            ...(etcd.auth === undefined ? {} : { auth: etcd.auth }),
          },
    standalone:
      standalone === undefined
        ? undefined
        : { stateFile: standalone.stateFile, ...(standalone.freshState === true ? { freshState: true } : {}) },
    workers: { from: workers.first, to: workers.last },
    ...(etcd === undefined ? {} : { leaseTtlSeconds: etcd.ttlSeconds, fenceMarginMs: etcd.fenceMarginMs }),
    timeSource: c.timeSource.mode,
    maxClockOffsetMs: c.timeSource.maxOffsetMs,
    maxRollbackMs: c.guard.maxRollbackMs,
    maxFenceMs: c.guard.maxFenceMs,
    ...node,
  };
}

/** A flat configuration's fields, as the cases read them. */
type Flat = Record<string, unknown> & {
  standalone?: { stateFile: string; freshState?: true } | undefined;
  etcd?: { readonly [field: string]: unknown } | undefined;
};

function config(argv: string[], env: Record<string, string> = {}): Flat {
  const outcome = parseConfig(standaloneUnlessEtcd(argv, env), env);
  if (outcome.kind !== 'config') throw new Error(`expected a config, got exit ${outcome.code}: ${outcome.stderr}`);
  return flat(outcome.config);
}

function failure(argv: string[], env: Record<string, string> = {}, exact = false): string {
  const outcome = parseConfig(exact ? argv : standaloneUnlessEtcd(argv, env), env);
  if (outcome.kind !== 'exit') throw new Error(`expected exit 2, got a config ${JSON.stringify(outcome.config)}`);
  expect(outcome.code).toBe(2);
  expect(outcome.stdout).toBe('');
  // One line on stderr, no stack trace.
  expect(outcome.stderr.endsWith('\n')).toBe(true);
  expect(outcome.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(outcome.stderr).not.toMatch(/\bat .*\(.*:\d+:\d+\)/);
  return outcome.stderr;
}

describe('parseConfig', () => {
  it('reads the etcd TLS files and credentials, never a password from the command line (issue 15)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'idgen-config-'));
    const file = (name: string, text: string): string => {
      writeFileSync(join(dir, name), text);
      return join(dir, name);
    };
    const cert = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
    const key = '-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n';
    const etcd = ['--etcd', 'https://127.0.0.1:2379', '--region', '2'];
    const c = config(etcd, {
      IDGEN_ETCD_CA: file('ca.crt', cert),
      IDGEN_ETCD_CERT: file('c.crt', cert),
      IDGEN_ETCD_KEY: file('c.key', key),
      IDGEN_ETCD_USER: 'idgen-node',
      IDGEN_ETCD_PASSWORD_FILE: file('pw', 's3cret\n'),
    });
    expect(c.etcd?.tls).toEqual({ ca: cert, cert, key });
    expect(c.etcd?.auth).toEqual({ username: 'idgen-node', password: 's3cret' });
    expect(failure([...etcd, '--etcd-ca', join(dir, 'missing')])).toMatch(
      /--etcd-ca: cannot read the etcd CA file .*ENOENT/,
    );
    expect(failure([...etcd, '--etcd-ca', file('bad.crt', 'hello')])).toMatch(/is not a PEM certificate/);
    expect(failure([...etcd, '--etcd-cert', join(dir, 'c.crt')])).toMatch(/--etcd-cert and --etcd-key go together/);
    expect(failure([...etcd, '--etcd-user', 'u'])).toMatch(/--etcd-user and --etcd-password-file go together/);
    expect(failure([...etcd, '--etcd-user', 'u', '--etcd-password-file', file('empty', '')])).toMatch(/is empty/);
    expect(failure(['--etcd', 'http://127.0.0.1:2379', '--region', '2', '--etcd-ca', join(dir, 'ca.crt')])).toMatch(
      /uses http:\/\/; use https:\/\//,
    );
    expect(failure(['--etcd-user', 'u', '--etcd-password-file', join(dir, 'pw')])).toMatch(
      /--etcd-user applies only with --etcd/,
    );
    // There is no flag that takes a password.
    expect(FLAGS.some((f) => /password </.test(f.flags))).toBe(false);
  });

  it('runs standalone only when asked by name, on a state file named by region (issue 12)', () => {
    expect(failure([], {}, true)).toMatch(/give --etcd <urls> \(production\) or --standalone/);
    expect(failure(['--region', '2'], { IDGEN_STANDALONE: '0' }, true)).toMatch(/or --standalone/);
    expect(failure(['--standalone', '--etcd', 'http://127.0.0.1:2379', '--region', '2'], {}, true)).toMatch(/not both/);
    expect(failure(['--etcd', 'http://127.0.0.1:2379', '--region', '2', '--state-file', '/x'], {}, true)).toMatch(
      /applies only with --standalone/,
    );
    // A directory that survives a reboot, not the temp directory: @idgen/lease's default, by region.
    expect(config(['--region', '2'], { IDGEN_STANDALONE: '1' }).standalone?.stateFile).toBe(
      defaultStandaloneStateFile(2),
    );
    expect(config(['--standalone', '--state-file', '/var/lib/idgen/s.json']).standalone).toEqual({
      stateFile: '/var/lib/idgen/s.json',
    });
    expect(config([], { IDGEN_STANDALONE: 'true', IDGEN_STATE_FILE: '/s.json' }).standalone).toEqual({
      stateFile: '/s.json',
    });
    expect(config(['--etcd', 'http://127.0.0.1:2379', '--region', '2']).standalone).toBeUndefined();
    // Starting over on an untrustworthy state file is asked for by name too (it discards the record that keeps a
    // restart from going back), and only in standalone mode.
    expect(config(['--standalone', '--state-file', '/s.json', '--fresh-state']).standalone).toEqual({
      stateFile: '/s.json',
      freshState: true,
    });
    expect(
      config([], { IDGEN_STANDALONE: '1', IDGEN_STATE_FILE: '/s.json', IDGEN_FRESH_STATE: '1' }).standalone,
    ).toEqual({
      stateFile: '/s.json',
      freshState: true,
    });
    expect(failure(['--etcd', 'http://127.0.0.1:2379', '--region', '2', '--fresh-state'], {}, true)).toMatch(
      /--fresh-state applies only with --standalone/,
    );
  });

  it('takes --tenure-journal with etcd only (the witness outside etcd, docs/design.md §5)', () => {
    const etcd = ['--etcd', 'http://127.0.0.1:2379', '--region', '2'];
    const outcome = parseConfig([...etcd, '--tenure-journal', '/var/lib/idgen/journal'], {});
    expect(outcome.kind === 'config' ? outcome.config.tenureJournal : outcome.stderr).toBe('/var/lib/idgen/journal');
    const none = parseConfig(etcd, {});
    expect(none.kind === 'config' ? none.config.tenureJournal : none.stderr).toBeUndefined();
    expect(failure(['--standalone', '--tenure-journal', '/j'], {}, true)).toMatch(
      /--tenure-journal applies only with --etcd/,
    );
  });

  it('has the documented defaults (standalone, 127.0.0.1:8080, metrics on 9464)', () => {
    const c = config([]);
    expect(c).toMatchObject({
      region: 0,
      etcd: undefined,
      listen: { host: '127.0.0.1', port: 8080 },
      advertise: undefined,
      metricsListen: { host: '127.0.0.1', port: 9464 },
      workers: { from: 0, to: 17 }, // the nodes' default share; embedded callers take 18-127
      timeSource: 'chrony',
      maxCount: 4096,
      logLevel: 'info',
      maxRollbackMs: 10,
      maxFenceMs: 30000,
      maxClockOffsetMs: 10,
      http2Server: 'idgen',
      maxConnections: 4096,
      prefaceTimeoutMs: 4000,
      idleTimeoutMs: 30000,
      stalledWriteTimeoutMs: 10000,
    });
    expect(c['nodeId']).toMatch(/^[A-Za-z0-9._:-]+-\d+-[0-9a-f]{6}$/);
    // The lease's TTL and margin, with etcd (standalone has neither).
    expect(config(['--etcd', 'http://127.0.0.1:2379', '--region', '2'])).toMatchObject({
      leaseTtlSeconds: 6,
      fenceMarginMs: 1000,
    });
  });

  it('reads every flag from the command line', () => {
    const c = config([
      '--region',
      '2',
      '--etcd',
      'http://127.0.0.1:2379,http://127.0.0.1:2380',
      '--etcd-prefix',
      '/x/y',
      '--listen',
      '0.0.0.0:0',
      '--advertise',
      'node1.example:8080',
      '--metrics-listen',
      'off',
      '--workers',
      '5-9',
      '--lease-ttl',
      '10',
      '--fence-margin-ms',
      '1500',
      '--time-source',
      'none',
      '--max-count',
      '100',
      '--node-id',
      'n-1',
      '--log-level',
      'warn',
      '--max-rollback-ms',
      '5',
      '--max-fence-ms',
      '2000',
      '--max-clock-offset-ms',
      '20',
      '--request-timeout-ms',
      '1000',
      '--shutdown-timeout-ms',
      '3000',
      '--max-body-bytes',
      '4096',
      '--http2-server',
      'node',
      '--status-details',
      'full',
      '--max-connections',
      '100',
      '--max-streams-in-flight',
      '500',
      '--preface-timeout-ms',
      '2000',
      '--idle-timeout-ms',
      '9000',
      '--stalled-write-timeout-ms',
      '3000',
    ]);
    expect(c).toEqual({
      region: 2,
      etcd: { endpoints: ['http://127.0.0.1:2379', 'http://127.0.0.1:2380'], prefix: '/x/y' },
      listen: { host: '0.0.0.0', port: 0 },
      advertise: 'node1.example:8080',
      metricsListen: undefined,
      workers: { from: 5, to: 9 },
      leaseTtlSeconds: 10,
      fenceMarginMs: 1500,
      timeSource: 'none',
      maxCount: 100,
      nodeId: 'n-1',
      logLevel: 'warn',
      maxRollbackMs: 5,
      maxFenceMs: 2000,
      maxClockOffsetMs: 20,
      requestTimeoutMs: 1000,
      shutdownTimeoutMs: 3000,
      maxBodyBytes: 4096,
      maxConnections: 100,
      maxStreamsInFlight: 500,
      prefaceTimeoutMs: 2000,
      idleTimeoutMs: 9000,
      stalledWriteTimeoutMs: 3000,
      http2Server: 'node',
      statusDetails: 'full',
    });
  });

  it('reads every flag from its IDGEN_* variable, and the command line wins', () => {
    const env = {
      IDGEN_REGION: '3',
      IDGEN_ETCD: 'http://10.0.0.1:2379',
      IDGEN_ETCD_PREFIX: '/p',
      IDGEN_LISTEN: '[::1]:9000',
      IDGEN_ADVERTISE: '[::1]:9000',
      IDGEN_METRICS_LISTEN: '',
      IDGEN_WORKERS: '7',
      IDGEN_LEASE_TTL: '8',
      IDGEN_FENCE_MARGIN_MS: '2000',
      IDGEN_TIME_SOURCE: 'none',
      IDGEN_MAX_COUNT: '10',
      IDGEN_NODE_ID: 'env-node',
      IDGEN_LOG_LEVEL: 'debug',
      IDGEN_MAX_ROLLBACK_MS: '1',
      IDGEN_MAX_FENCE_MS: '5000',
      IDGEN_MAX_CLOCK_OFFSET_MS: '3',
      IDGEN_REQUEST_TIMEOUT_MS: '700',
      IDGEN_SHUTDOWN_TIMEOUT_MS: '800',
      IDGEN_MAX_BODY_BYTES: '2048',
      IDGEN_HTTP2_SERVER: 'node',
      IDGEN_STATUS_DETAILS: 'redacted',
      IDGEN_MAX_CONNECTIONS: '512',
      IDGEN_MAX_STREAMS_IN_FLIGHT: '4000',
      IDGEN_PREFACE_TIMEOUT_MS: '1000',
      IDGEN_IDLE_TIMEOUT_MS: '60000',
      IDGEN_STALLED_WRITE_TIMEOUT_MS: '20000',
      IDGEN_TENURE_JOURNAL: '/var/lib/idgen/journal',
    };
    // Every flag has a variable, and this test sets each one but the standalone pair, which cannot go with
    // etcd (read from the environment in 'runs standalone only when asked by name'), and the etcd credential
    // files (read from the environment in 'reads the etcd TLS files and credentials').
    // The TLS files are read in test/tls.spec.ts.
    const standalonePair = [
      'IDGEN_STANDALONE',
      'IDGEN_STATE_FILE',
      'IDGEN_FRESH_STATE',
      'IDGEN_ETCD_CA',
      'IDGEN_ETCD_CERT',
      'IDGEN_ETCD_KEY',
      'IDGEN_ETCD_USER',
      'IDGEN_ETCD_PASSWORD_FILE',
      'IDGEN_TLS_CERT',
      'IDGEN_TLS_KEY',
      'IDGEN_TLS_CLIENT_CA',
      'IDGEN_TLS_CLIENT_NAMES',
    ];
    expect(Object.keys(env).sort()).toEqual(
      FLAGS.map((f) => f.env)
        .filter((e) => !standalonePair.includes(e))
        .sort(),
    );
    expect(config([], env)).toEqual({
      region: 3,
      etcd: { endpoints: ['http://10.0.0.1:2379'], prefix: '/p' },
      tls: undefined,
      standalone: undefined,
      listen: { host: '::1', port: 9000 },
      advertise: '[::1]:9000',
      metricsListen: undefined,
      workers: { from: 7, to: 7 },
      leaseTtlSeconds: 8,
      fenceMarginMs: 2000,
      timeSource: 'none',
      maxCount: 10,
      nodeId: 'env-node',
      logLevel: 'debug',
      maxRollbackMs: 1,
      maxFenceMs: 5000,
      maxClockOffsetMs: 3,
      requestTimeoutMs: 700,
      shutdownTimeoutMs: 800,
      maxBodyBytes: 2048,
      maxConnections: 512,
      maxStreamsInFlight: 4000,
      prefaceTimeoutMs: 1000,
      idleTimeoutMs: 60000,
      stalledWriteTimeoutMs: 20000,
      http2Server: 'node',
      statusDetails: 'redacted',
    });
    expect(config(['--region', '4', '--max-count', '20'], env)).toMatchObject({ region: 4, maxCount: 20 });
  });

  it('accepts the shortest lease TTL with a margin that leaves room for a keep-alive (keep-alives every TTL/3)', () => {
    expect(
      config(['--region', '1', '--etcd', 'http://127.0.0.1:2379', '--lease-ttl', '2', '--fence-margin-ms', '500']),
    ).toMatchObject({ leaseTtlSeconds: 2 });
    expect(config(['--region', '1', '--etcd', 'http://127.0.0.1:2379', '--lease-ttl', '4'])).toMatchObject({
      leaseTtlSeconds: 4,
    });
  });

  it('treats an empty variable as unset, except IDGEN_METRICS_LISTEN where empty turns metrics off', () => {
    expect(config([], { IDGEN_LISTEN: '', IDGEN_MAX_COUNT: '' })).toMatchObject({
      listen: { port: 8080 },
      maxCount: 4096,
    });
    expect(config([], { IDGEN_METRICS_LISTEN: '' }).metricsListen).toBeUndefined();
    expect(config(['--metrics-listen', '']).metricsListen).toBeUndefined();
  });

  it.each([
    [['--region', '8'], /--region must be an integer from 0 to 7, got "8"/],
    [['--region', '-1'], /--region must be an integer from 0 to 7/],
    [['--region', '1.5'], /--region must be an integer/],
    [['--region', 'two'], /--region must be an integer/],
    [['--etcd', 'http://127.0.0.1:2379'], /--region is required with --etcd/],
    [['--region', '1', '--etcd', 'localhost:2379'], /--etcd: endpoint "localhost:2379" is not an etcd client URL like/],
    [
      ['--region', '1', '--etcd', 'http://127.0.0.1'],
      /--etcd: endpoint "http:\/\/127.0.0.1" is not an etcd client URL/,
    ],
    [['--region', '1', '--etcd', ','], /--etcd must list at least one etcd URL/],
    [
      ['--region', '1', '--etcd', 'http://127.0.0.1:2379', '--etcd-prefix', 'idgen'],
      /--etcd-prefix: prefix must start with "\/"/,
    ],
    [
      ['--region', '1', '--etcd', 'http://127.0.0.1:2379', '--etcd-prefix', '/idgen/'],
      /--etcd-prefix: prefix must start with "\/", not end with "\/"/,
    ],
    [['--etcd-prefix', 'idgen'], /--etcd-prefix: prefix must start with "\/"/],
    [['--listen', '8080'], /--listen must be host:port/],
    [['--listen', '127.0.0.1:70000'], /--listen must be host:port with a port from 0 to 65535/],
    [['--advertise', 'host:0'], /--advertise must be host:port with a port from 1 to 65535/],
    [['--metrics-listen', '127.0.0.1:8080'], /--metrics-listen must differ from --listen/],
    [['--workers', '5-3'], /--workers must be a range from-to within 0-127/],
    [['--workers', '0-128'], /--workers must be a range/],
    [['--workers', 'all'], /--workers must be a range/],
    [['--lease-ttl', '1'], /--lease-ttl must be an integer from 2 to 60/],
    [
      ['--lease-ttl', '2', '--fence-margin-ms', '2000'],
      /--fence-margin-ms \(2000\) must be below the lease TTL \(2000 ms\)/,
    ],
    [
      ['--region', '1', '--etcd', 'http://127.0.0.1:2379', '--lease-ttl', '2', '--fence-margin-ms', '1000'],
      /lease settings .* do not fit: keepAliveIntervalMs \+ keepAliveTimeoutMs/,
    ],
    [['--time-source', 'ntp'], /--time-source must be one of chrony, none, got "ntp"/],
    [['--max-count', '0'], /--max-count must be an integer from 1 to 65536, got "0"/],
    [['--max-count', '65537'], /--max-count must be an integer from 1 to 65536/],
    [['--max-connections', '0'], /--max-connections must be an integer from 1 to 1000000, got "0"/],
    [['--max-connections', 'lots'], /--max-connections must be an integer from 1 to 1000000/],
    [['--idle-timeout-ms', '10'], /--idle-timeout-ms must be an integer from 1000 to 3600000, got "10"/],
    [['--preface-timeout-ms', '-1'], /--preface-timeout-ms must be an integer from 100 to 600000/],
    [['--node-id', 'a b'], /--node-id must be 1-128 characters/],
    [['--log-level', 'loud'], /--log-level must be one of/],
    [['--request-timeout-ms', '5'], /--request-timeout-ms must be an integer from 100/],
    [['--max-body-bytes', '1'], /--max-body-bytes must be an integer from 1024/],
    [['--http2-server', 'nghttp2'], /--http2-server must be one of idgen, node, got "nghttp2"/],
    [['--bogus'], /unknown option '--bogus'/],
    [['--region'], /option '--region <code>' argument missing/],
    [['extra'], /too many arguments/],
  ])('rejects %j with one line and exit 2', (argv, message) => {
    const line = failure(argv);
    expect(line).toMatch(message);
    expect(line.startsWith('idgen-server: ')).toBe(true);
  });

  it('names the variable when the bad value came from the environment', () => {
    expect(failure([], { IDGEN_MAX_COUNT: 'lots' })).toMatch(
      /IDGEN_MAX_COUNT must be an integer from 1 to 65536, got "lots"/,
    );
    expect(failure([], { IDGEN_TIME_SOURCE: 'sundial' })).toMatch(/IDGEN_TIME_SOURCE must be one of chrony, none/);
  });

  it('prints help with every flag, its variable and its default, and exits 0', () => {
    const outcome = parseConfig(['--help'], {});
    expect(outcome).toMatchObject({ kind: 'exit', code: 0, stderr: '' });
    const text = outcome.kind === 'exit' ? outcome.stdout : '';
    expect(text).toBe(helpText());
    const help = text.replace(/\s+/g, ' ');
    for (const f of FLAGS) {
      const flag = f.flags.split(' ')[0] ?? '';
      expect(help).toContain(flag);
      expect(help).toContain(`[${f.env}]`);
      if (f.defaultValue !== undefined) expect(help).toContain(`(default: "${f.defaultValue}")`);
      if (f.defaultDescription !== undefined) expect(help).toContain(`(default: ${f.defaultDescription})`);
    }
  });
});
