// Every verb ends within its deadlines, so no broken endpoint can hang a script: the BUILT idgen, run as
// a process, against an endpoint that fails in one way per spec (a port that accepts and never answers, a TLS
// handshake that never finishes, a paused real etcd, a connection reset, a wrong CA, a missing client certificate),
// prints one line naming the failure and exits with the documented code (3: could not reach etcd or the node).
// Each run is awaited until the process has exited, with a generous test deadline; no assertion is about speed.
// IDGEN_TEST_CLI_MAIN runs another build (an older dist) against the same specs.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { cleanupAll, makeTestPki, startEtcd, tempDirSync, type EtcdServer, type TestPki } from '@idgen/testing';

jest.setTimeout(180_000);

const CLI_MAIN = process.env['IDGEN_TEST_CLI_MAIN'] ?? join(__dirname, '..', 'dist', 'main.js');
/** How long a run may take before the test calls it hung: far above any timeout given to it. */
const HUNG_AFTER_MS = 60_000;
/** The dial timeout against an etcd that answers with a refusal: the refusal, not the timeout, must come first. */
const ANSWERS_MS = 15_000;

/** An older build (IDGEN_TEST_CLI_MAIN) has neither --dial-timeout-ms nor --tls-ca: they are left out for it. */
function forBuild(args: readonly string[]): string[] {
  if (process.env['IDGEN_TEST_CLI_MAIN'] === undefined) return [...args];
  return args.filter(
    (a, i) =>
      !['--dial-timeout-ms', '--tls-ca'].includes(a) && !['--dial-timeout-ms', '--tls-ca'].includes(args[i - 1] ?? ''),
  );
}

interface Run {
  readonly args: readonly string[];
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** false: still running at HUNG_AFTER_MS (then killed). */
  readonly exited: boolean;
}

/** Runs the built CLI without any IDGEN_* or ETCDCTL_* of this environment; resolves once the process has exited. */
function idgen(args: readonly string[]): Promise<Run> {
  const env: NodeJS.ProcessEnv = { NODE_PATH: join(__dirname, '..', '..', '..', 'node_modules') };
  for (const [k, v] of Object.entries(process.env)) if (!/^(IDGEN_|ETCDCTL_)/.test(k)) env[k] = v;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI_MAIN, ...forBuild(args)], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let exited = true;
    const hung = setTimeout(() => {
      exited = false;
      child.kill('SIGKILL');
    }, HUNG_AFTER_MS);
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.on('close', (code) => {
      clearTimeout(hung);
      resolve({ args, code: exited ? code : null, stdout, stderr, exited });
    });
  });
}

/** Expects every run to have exited with `code` and one stderr line matching `line`. */
function expectEnded(runs: readonly Run[], code: number, line: RegExp): void {
  for (const r of runs) {
    // grpc-js names an etcd given by IP as the TLS server name, which Node 24 warns about (DEP0123).
    const stderr = r.stderr
      .split('\n')
      .filter((l) => l !== '' && !/DEP0123|--trace-deprecation/.test(l))
      .join('\n');
    const seen = { args: r.args.join(' '), exited: r.exited, code: r.code, stderr };
    expect(seen).toEqual({ ...seen, exited: true, code });
    expect(seen.stderr.split('\n')).toHaveLength(1);
    expect(seen.stderr).toMatch(line);
  }
}

/** A TCP server whose connections get `onSocket`; closed (every socket destroyed) in afterAll. */
async function tcpServer(onSocket: (s: Socket) => void): Promise<{ server: Server; port: number }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
    s.on('close', () => sockets.delete(s));
    onSocket(s);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  servers.push({ server, sockets });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { server, port: address.port };
}

const servers: { server: Server; sockets: Set<Socket> }[] = [];
const dir = tempDirSync('idgen-cli-deadlines');
let pki: TestPki;
let otherPki: TestPki;

beforeAll(() => {
  pki = makeTestPki({ dir: join(dir.path, 'pki'), name: 'deadlines', clients: ['idgen-cli'] });
  otherPki = makeTestPki({ dir: join(dir.path, 'other'), name: 'other' });
});

afterAll(async () => {
  for (const { server, sockets } of servers) {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  }
  await cleanupAll();
  await dir.remove();
});

/** The etcd verbs, each against `etcd` with `more` flags, and the timeouts given. */
function etcdVerbs(etcd: string, more: readonly string[], dialMs = 1000): string[][] {
  const t = ['--timeout-ms', '1000', '--dial-timeout-ms', String(dialMs), ...more];
  const config = join(dir.path, `audit-${servers.length}-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(config, JSON.stringify({ regions: [{ name: 'r1', etcd: [etcd], ...auditTls(more) }] }));
  return [
    ['layout', '--etcd', etcd, ...t],
    ['leases', '--etcd', etcd, ...t],
    ['status', '--etcd', etcd, ...t],
    ['next', '--etcd', etcd, '--region', '1', ...t],
    ['region', 'show', '--etcd', etcd, ...t],
    ['spare', 'list', '--etcd', etcd, ...t],
    ['decode', '1', '--etcd', etcd, ...t],
    ['audit', '--config', config, '--timeout-ms', '1000', '--dial-timeout-ms', String(dialMs)],
  ];
}

/** The audit config's TLS fields for the `--etcd-*` flags in `more`. */
function auditTls(more: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < more.length; i += 2) {
    const m = /^--etcd-(ca|cert|key)$/.exec(more[i] ?? '');
    if (m?.[1] !== undefined) out[m[1]] = more[i + 1] ?? '';
  }
  return out;
}

describe('idgen ends within its deadlines', () => {
  it('a port that accepts and never answers (plaintext): every verb exits 3, "no HTTP/2 answer"', async () => {
    const { port } = await tcpServer(() => undefined);
    const url = `http://127.0.0.1:${port}`;
    const runs = await Promise.all(
      [
        ...etcdVerbs(url, []),
        ['status', '--server', url, '--timeout-ms', '1000', '--dial-timeout-ms', '1000'],
        ['next', '--server', url, '--timeout-ms', '1000', '--dial-timeout-ms', '1000'],
      ].map(idgen),
    );
    expectEnded(runs, 3, /no HTTP\/2 answer within 1000 ms|no IDs from .* within 1000 ms/);
  });

  it('a TLS handshake that never finishes: exit 3, "the TLS handshake did not finish" (the reported layout hang)', async () => {
    const { port } = await tcpServer(() => undefined);
    const url = `https://127.0.0.1:${port}`;
    const runs = await Promise.all(
      [
        ...etcdVerbs(url, ['--etcd-ca', pki.caFile]),
        ['status', '--server', url, '--tls-ca', pki.caFile, '--timeout-ms', '1000', '--dial-timeout-ms', '1000'],
        ['next', '--server', url, '--tls-ca', pki.caFile, '--timeout-ms', '1000', '--dial-timeout-ms', '1000'],
      ].map(idgen),
    );
    expectEnded(runs, 3, /the TLS handshake did not finish within 1000 ms/);
  });

  it('a paused (SIGSTOP) real etcd: exit 3', async () => {
    const etcd: EtcdServer = await startEtcd();
    etcd.pause();
    try {
      const runs = await Promise.all(etcdVerbs(etcd.clientUrl, []).map(idgen));
      expectEnded(runs, 3, /no HTTP\/2 answer within 1000 ms \(dial timeout\): the etcd is paused or hung/);
    } finally {
      etcd.resume();
      await etcd.stop();
    }
  });

  it("an etcd that answers the CLI's dial, then goes silent for the gRPC client's own connection: exit 3", async () => {
    // The first connection (the CLI's dial) is piped to a real TLS etcd; every later one (etcd3's channel) is held
    // silent, so grpc-js's TLS handshake never finishes and its socket outlives the client's close(): the verb ends
    // on its deadline and the process must still exit (main's bound after the verb).
    const etcd = await startEtcd({ tls: { pki } });
    try {
      const [host, port] = etcd.endpoint.split(':');
      let first = true;
      const proxy = await tcpServer((s) => {
        if (!first) return;
        first = false;
        const upstream = connect({ host: host ?? '127.0.0.1', port: Number(port) });
        upstream.on('error', () => s.destroy());
        s.pipe(upstream).pipe(s);
      });
      const r = await idgen([
        'layout',
        '--etcd',
        `https://localhost:${proxy.port}`,
        '--etcd-ca',
        pki.caFile,
        '--etcd-cert',
        pki.clients['idgen-cli']?.certFile ?? '',
        '--etcd-key',
        pki.clients['idgen-cli']?.keyFile ?? '',
        '--timeout-ms',
        '1000',
        '--dial-timeout-ms',
        String(ANSWERS_MS),
      ]);
      expectEnded([r], 3, /no answer within 1000 ms/);
    } finally {
      await etcd.stop();
    }
  });

  it('a connection reset: exit 3, "connection reset"', async () => {
    const { port } = await tcpServer((s) => s.resetAndDestroy());
    const runs = await Promise.all(
      [
        ...etcdVerbs(`http://127.0.0.1:${port}`, []),
        ...etcdVerbs(`https://127.0.0.1:${port}`, ['--etcd-ca', pki.caFile]).slice(0, 2),
        ['status', '--server', `http://127.0.0.1:${port}`, '--timeout-ms', '1000', '--dial-timeout-ms', '1000'],
      ].map(idgen),
    );
    expectEnded(runs, 3, /connection reset/);
  });

  it("a wrong CA: exit 3, the etcd's certificate is not signed by --etcd-ca", async () => {
    const etcd = await startEtcd({ tls: { pki } });
    try {
      const runs = await Promise.all(etcdVerbs(etcd.clientUrl, ['--etcd-ca', otherPki.caFile], ANSWERS_MS).map(idgen));
      expectEnded(runs, 3, /its certificate is not signed by --etcd-ca .*wrong CA file\?/);
    } finally {
      await etcd.stop();
    }
  });

  it('a missing client certificate: exit 3, "this etcd wants a client certificate"', async () => {
    const etcd = await startEtcd({ tls: { pki, clientCertAuth: true } });
    try {
      const runs = await Promise.all(etcdVerbs(etcd.clientUrl, ['--etcd-ca', pki.caFile], ANSWERS_MS).map(idgen));
      expectEnded(runs, 3, /this etcd wants a client certificate: give --etcd-cert and --etcd-key/);
      // With the certificate the same etcd answers (no layout record yet: exit 1), so the line above named the cause.
      const cert = pki.clients['idgen-cli'];
      if (cert === undefined) throw new Error('no client certificate');
      const withCert = await idgen([
        'layout',
        '--etcd',
        etcd.clientUrl,
        '--etcd-ca',
        pki.caFile,
        '--etcd-cert',
        cert.certFile,
        '--etcd-key',
        cert.keyFile,
      ]);
      expectEnded([withCert], 1, /no layout record/);
    } finally {
      await etcd.stop();
    }
  });
});
