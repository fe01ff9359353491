// What ships must start (issue 33). The production tree that deploy/Dockerfile and the runbook's systemd install
// copy is made here by the one script both run (tools/scripts/prod-tree.sh), from a copy of the checkout as the
// image's build context holds it (.dockerignore applied), into a temporary root's /opt/idgen. Then nodes are started
// from that tree alone, the way each install starts them: the image's ENTRYPOINT and ENV (standalone, and against a
// real etcd with client TLS), and the systemd unit's own ExecStart with its Environment= lines, /etc/idgen/idgen.env
// from the runbook's example and the etcd password as a credential, followed by its ExecStartPost readiness wait.
// Each answers NextIds and stops with exit 0 on SIGTERM. A tree that cannot resolve a runtime import fails at the
// script's own check (tools/scripts/prod-tree-check.mjs); a node that cannot start fails here.
// (systemd is not PID 1 on the machines that run this: the unit's command runs as a child, with the unit's
// environment, as systemd would run it.)
import { cpSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createEtcdClient } from '@idgen/lease';
import { initRegion } from '@idgen/lease/operator';
import { IdGenerator } from '@idgen/proto';
import {
  CHRONY_HEALTHY,
  cleanupAll,
  createChronyStub,
  enableEtcdAuth,
  freePort,
  makeTestPki,
  spawnProcess,
  startEtcd,
  tempDirSync,
} from '@idgen/testing';
import type { ProcessHandle, TestPki } from '@idgen/testing';

const REPO = join(__dirname, '..', '..', '..');
/** `npm ci` and the server's build on a busy 2-core machine: minutes, not seconds. */
const BUILD_DEADLINE_MS = 20 * 60_000;
const START_DEADLINE_MS = 60_000;
const REGION = 2;

jest.setTimeout(120_000);
afterAll(() => cleanupAll());

/** `.dockerignore`'s patterns as a filter: `**\/name` anywhere, any other pattern at the top of the context. */
function dockerignore(): (rel: string) => boolean {
  const glob = (p: string): RegExp => new RegExp(`^${p.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
  const rules = readFileSync(join(REPO, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => (l.startsWith('**/') ? { anywhere: true, re: glob(l.slice(3)) } : { anywhere: false, re: glob(l) }));
  return (rel) => {
    const parts = rel.split('/');
    const base = parts[parts.length - 1] ?? '';
    return rules.some((r) => (r.anywhere ? r.re.test(base) : r.re.test(rel)));
  };
}

/** Waits for a process to end, killing it past `deadlineMs`. */
async function finished(proc: ProcessHandle, deadlineMs: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), deadlineMs)));
  const exit = await Promise.race([proc.exited, late]);
  clearTimeout(timer);
  if (exit === 'late') {
    await proc.kill();
    throw new Error(`${proc.command} did not end within ${deadlineMs} ms: ${proc.tail(20)}`);
  }
  return exit.code;
}

/** An environment with this machine's PATH (Node 24 first) and nothing of the test's own IDGEN_* or NODE_* state. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('IDGEN_') && !k.startsWith('NODE_') && !k.startsWith('npm_')) env[k] = v;
  env['PATH'] = `${dirname(process.execPath)}:${process.env['PATH'] ?? ''}`;
  return { ...env, ...extra };
}

let root = '';
/** The tree's install directory, `/opt/idgen` under the temporary root. */
let opt = '';

beforeAll(async () => {
  root = tempDirSync('prod-tree-root').path;
  opt = join(root, 'opt', 'idgen');
  // The build context: the checkout without what .dockerignore leaves out (nothing installed or built).
  const context = tempDirSync('prod-tree-context').path;
  const ignored = dockerignore();
  cpSync(REPO, context, {
    recursive: true,
    filter: (src) => src === REPO || !ignored(relative(REPO, src)),
  });
  const build = spawnProcess('bash', [join(context, 'tools', 'scripts', 'prod-tree.sh'), opt], {
    cwd: context,
    env: cleanEnv({}),
    maxLines: 400,
  });
  const code = await finished(build, BUILD_DEADLINE_MS);
  if (code !== 0) throw new Error(`prod-tree.sh exited ${String(code)}:\n${build.tail(15)}`);
  // The systemd install's runtime at its explicit path (the runbook copies Node 24 there; this one is the same).
  symlinkSync(dirname(dirname(process.execPath)), join(opt, 'node'));
}, BUILD_DEADLINE_MS + 10_000);

/** The tree's path for an absolute path of the install (`/opt/idgen/...`). */
const inRoot = (arg: string): string => (arg.startsWith('/opt/idgen') ? join(root, arg) : arg);

/** NextIds(count) over gRPC, on h2c or TLS with a client certificate; the IDs' count and region. */
async function nextIds(
  baseUrl: string,
  count: number,
  tls?: { pki: TestPki; client: string },
): Promise<{ ids: number; regions: number[] }> {
  const cert = tls?.pki.clients[tls.client];
  const client = createClient(
    IdGenerator,
    createGrpcTransport({
      baseUrl,
      ...(tls === undefined ? {} : { nodeOptions: { ca: tls.pki.ca, cert: cert?.cert, key: cert?.key } }),
    }),
  );
  const answer = await client.nextIds({ count }, { timeoutMs: 10_000 });
  return {
    ids: answer.blocks.reduce((n, b) => n + b.count, 0),
    regions: answer.blocks.map((b) => DEFAULT_LAYOUT.decompose(b.first).region),
  };
}

/** SIGTERM, as `docker stop` and `systemctl stop` send it: the node drains and exits 0. */
async function stopped(node: ProcessHandle): Promise<{ code: number | null; stopped: boolean }> {
  node.signal('SIGTERM');
  const code = await finished(node, 30_000);
  return { code, stopped: node.stdoutLines.some((l) => l.includes('"msg":"stopped"')) };
}

describe('deploy/Dockerfile: the tree the image copies, started by its ENTRYPOINT', () => {
  const dockerfile = readFileSync(join(REPO, 'deploy', 'Dockerfile'), 'utf8');
  /** ENTRYPOINT's exec form, `node` being the image's Node 24 on PATH. */
  const entrypoint = (): string[] => {
    const m = /^ENTRYPOINT (\[.*\])$/m.exec(dockerfile);
    if (m?.[1] === undefined) throw new Error('no ENTRYPOINT in exec form in deploy/Dockerfile');
    const argv = JSON.parse(m[1]) as string[];
    return argv.map((a, i) => (i === 0 && a === 'node' ? process.execPath : inRoot(a)));
  };
  /** The final stage's `ENV` variables (a `\`-continued `KEY=value` list: the last ENV of the file). */
  const imageEnv = (): Record<string, string> => {
    const m = [...dockerfile.matchAll(/^ENV ((?:.*\\\n)*.*)$/gm)].at(-1);
    const out: Record<string, string> = {};
    for (const pair of (m?.[1] ?? '').replace(/\\\n/g, ' ').split(/\s+/)) {
      const eq = pair.indexOf('=');
      if (eq > 0) out[pair.slice(0, eq)] = pair.slice(eq + 1).replace(/^\$.*/, '');
    }
    return out;
  };
  const start = async (env: Record<string, string>): Promise<{ node: ProcessHandle; port: number }> => {
    const [port, metrics] = [await freePort(), await freePort()];
    const [cmd = '', ...args] = entrypoint();
    const node = spawnProcess(cmd, args, {
      cwd: opt, // WORKDIR
      env: cleanEnv({
        ...imageEnv(),
        IDGEN_LISTEN: `127.0.0.1:${port}`,
        IDGEN_METRICS_LISTEN: `127.0.0.1:${metrics}`,
        IDGEN_TIME_SOURCE: 'none', // no chronyd here; the image's users mount the host's (Dockerfile)
        ...env,
      }),
    });
    await node.waitForLine(/"msg":"ready"/, START_DEADLINE_MS);
    return { node, port };
  };

  it('is the tree the image and the runbook make: both run prod-tree.sh into /opt/idgen', () => {
    expect(dockerfile).toMatch(/^\s+bash tools\/scripts\/prod-tree\.sh \/opt\/idgen$/m);
    expect(dockerfile).toMatch(/^COPY --from=build --chown=root:root \/opt\/idgen \/opt\/idgen$/m);
    const runbook = readFileSync(join(REPO, 'docs', 'runbook.md'), 'utf8');
    const install = runbook.slice(runbook.indexOf('### Installing on a host (systemd)'));
    expect(install.slice(0, install.indexOf('```\n\n'))).toMatch(/^bash tools\/scripts\/prod-tree\.sh \/opt\/idgen$/m);
  });

  it('runs from /opt/idgen alone (no node_modules above it) and its imports resolve', () => {
    expect(existsSync(join(root, 'node_modules'))).toBe(false);
    expect(existsSync(join(opt, 'apps', 'server', 'dist', 'main.js'))).toBe(true);
    expect(imageEnv()).toMatchObject({ NODE_ENV: 'production' });
  });

  it('standalone: answers NextIds and stops on SIGTERM', async () => {
    const state = tempDirSync('prod-tree-state').path;
    const { node, port } = await start({ IDGEN_STANDALONE: '1', IDGEN_STATE_FILE: join(state, 'state.json') });
    expect(await nextIds(`http://127.0.0.1:${port}`, 3)).toEqual({ ids: 3, regions: [0] });
    expect(await stopped(node)).toEqual({ code: 0, stopped: true });
  });

  it('against etcd with client TLS: answers NextIds with its region', async () => {
    const pki = makeTestPki({ clients: ['idgen-node'], name: 'prod-tree-etcd' });
    const etcd = await startEtcd({ tls: { pki, clientCertAuth: true } });
    const client = pki.clients['idgen-node'];
    if (client === undefined) throw new Error('no client certificate');
    const admin = createEtcdClient({
      endpoints: [etcd.clientUrl],
      tls: { ca: pki.ca, cert: client.cert, key: client.key },
      auth: undefined,
    });
    try {
      await initRegion({ client: admin, prefix: '/idgen', timeoutMs: 5_000, layout: DEFAULT_LAYOUT }, REGION);
    } finally {
      admin.close();
    }
    const { node, port } = await start({
      IDGEN_REGION: String(REGION),
      IDGEN_ETCD: etcd.clientUrl,
      IDGEN_ETCD_CA: pki.caFile,
      IDGEN_ETCD_CERT: client.certFile,
      IDGEN_ETCD_KEY: client.keyFile,
    });
    expect(await nextIds(`http://127.0.0.1:${port}`, 5)).toEqual({ ids: 5, regions: [REGION] });
    expect(await stopped(node)).toEqual({ code: 0, stopped: true });
  });
});

describe("deploy/systemd: the runbook's install, started by the unit's own ExecStart", () => {
  const unit = readFileSync(join(REPO, 'deploy', 'systemd', 'idgen-server.service'), 'utf8');
  const settings = (key: string): string[] =>
    [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1] ?? '');
  const example = readFileSync(join(REPO, 'deploy', 'systemd', 'idgen.env.example'), 'utf8');

  it('starts with the unit environment and the example idgen.env, passes ExecStartPost, serves mTLS, stops on KillSignal', async () => {
    // etcd as the example expects it: client TLS and a user (idgen-node) with a password.
    const etcdPki = makeTestPki({ clients: ['idgen-node'], name: 'prod-tree-systemd-etcd' });
    const etcd = await startEtcd({ tls: { pki: etcdPki, clientCertAuth: true } });
    const password = 'node-password';
    enableEtcdAuth(
      etcd.clientUrl,
      'root-password',
      [{ name: 'idgen-node', password, prefix: '/idgen/', permission: 'readwrite' }],
      etcdPki,
    );
    const etcdClient = etcdPki.clients['idgen-node'];
    if (etcdClient === undefined) throw new Error('no client certificate');
    const admin = createEtcdClient({
      endpoints: [etcd.clientUrl],
      tls: { ca: etcdPki.ca, cert: etcdClient.cert, key: etcdClient.key },
      auth: { username: 'idgen-node', password },
    });
    try {
      await initRegion({ client: admin, prefix: '/idgen', timeoutMs: 5_000, layout: DEFAULT_LAYOUT }, REGION);
    } finally {
      admin.close();
    }
    // Serving TLS for the callers the example names.
    const servingPki = makeTestPki({ clients: ['orders-service'], name: 'prod-tree-systemd-serving' });
    const [port, metrics] = [await freePort(), await freePort()];
    // /etc/idgen: the example with this machine's endpoints, addresses and files; the password as a credential.
    const etc = join(root, 'etc', 'idgen');
    mkdirSync(etc, { recursive: true });
    const credentials = tempDirSync('prod-tree-credentials').path;
    writeFileSync(join(credentials, 'etcd-password'), `${password}\n`, { mode: 0o600 });
    const here: Record<string, string> = {
      IDGEN_ETCD: etcd.clientUrl,
      IDGEN_ETCD_CA: etcdPki.caFile,
      IDGEN_ETCD_CERT: etcdClient.certFile,
      IDGEN_ETCD_KEY: etcdClient.keyFile,
      IDGEN_TLS_CERT: servingPki.server.certFile,
      IDGEN_TLS_KEY: servingPki.server.keyFile,
      IDGEN_TLS_CLIENT_CA: servingPki.caFile,
      IDGEN_ADVERTISE: `127.0.0.1:${port}`,
      IDGEN_LISTEN: `127.0.0.1:${port}`,
      IDGEN_METRICS_LISTEN: `127.0.0.1:${metrics}`,
    };
    const env: Record<string, string> = {};
    for (const line of settings('Environment')) {
      const eq = line.indexOf('=');
      env[line.slice(0, eq)] = line.slice(eq + 1);
    }
    const lines = example.split('\n').filter((l) => /^[A-Z]/.test(l));
    for (const line of lines) {
      const eq = line.indexOf('=');
      const name = line.slice(0, eq);
      env[name] = here[name] ?? line.slice(eq + 1);
    }
    // Addresses the example leaves to the unit's defaults are this machine's too (loopback, free ports).
    Object.assign(env, { IDGEN_LISTEN: here['IDGEN_LISTEN'], IDGEN_METRICS_LISTEN: here['IDGEN_METRICS_LISTEN'] });
    writeFileSync(
      join(etc, 'idgen.env'),
      `${Object.entries(env)
        .map(([k, v]) => `${k}=${v}`)
        .join('\n')}\n`,
    );
    expect(env['IDGEN_ETCD_USER']).toBe('idgen-node');
    expect(env['NODE_ENV']).toBe('production');
    // The time source is the unit's default (chrony): a chronyc that reports a synchronised clock.
    const chrony = createChronyStub(CHRONY_HEALTHY);
    const unitEnv = cleanEnv({ ...env, CREDENTIALS_DIRECTORY: credentials });
    unitEnv['PATH'] = `${chrony.dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;
    const argv = (line: string): string[] =>
      line
        .replace(/\$\{CREDENTIALS_DIRECTORY\}/g, credentials)
        .split(/\s+/)
        .map(inRoot);
    const [execStart] = settings('ExecStart');
    const [cmd = '', ...args] = argv(execStart ?? '');
    expect(cmd).toBe(join(opt, 'node', 'bin', 'node'));
    const node = spawnProcess(cmd, args, { cwd: '/', env: unitEnv });
    // ExecStartPost: the readiness wait, with the unit's environment, returns 0 once the node is ready.
    const [post] = settings('ExecStartPost');
    const [postCmd = '', ...postArgs] = argv(post ?? '');
    const wait = spawnProcess(postCmd, postArgs, { cwd: '/', env: unitEnv });
    const waited = await finished(wait, 120_000);
    if (waited !== 0)
      throw new Error(`ExecStartPost exited ${String(waited)}: ${wait.tail(5)}\nnode: ${node.tail(10)}`);
    expect(await nextIds(`https://127.0.0.1:${port}`, 4, { pki: servingPki, client: 'orders-service' })).toEqual({
      ids: 4,
      regions: [REGION],
    });
    expect(settings('KillSignal')).toEqual(['SIGTERM']);
    expect(await stopped(node)).toEqual({ code: 0, stopped: true });
  });
});
