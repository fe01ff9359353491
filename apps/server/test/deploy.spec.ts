// The deploy files (deploy/) checked against the server's own configuration parser, so they cannot drift:
// every flag and IDGEN_* variable exists and parses, ports and probe paths match what the node serves, the
// grace periods exceed the shutdown timeout, the systemd unit passes `systemd-analyze verify`, and
// `npm start` hands SIGTERM to the node (issue 15).
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  cleanupAll,
  findOnPath,
  freePort,
  makeTestPki,
  shebangNodeFlags,
  spawnProcess,
  tempDirSync,
} from '@idgen/testing';
import type { TestPki } from '@idgen/testing';
import { parseAllDocuments } from 'yaml';
import { FLAGS, parseConfig } from '../src/config.js';
import { BIN_JS, MAIN_JS, parseLine, standaloneStateFile, startServer } from './support.js';

jest.setTimeout(120_000);
afterAll(() => cleanupAll());

const REPO = join(__dirname, '..', '..', '..');
const DEPLOY = join(REPO, 'deploy');
const flagNames = new Set(FLAGS.map((f) => f.flags.split(' ')[0]));
const envNames = new Set(FLAGS.map((f) => f.env));
const defaultShutdownMs = Number(FLAGS.find((f) => f.key === 'shutdownTimeoutMs')?.defaultValue);
/** The node's launch flags: the first line of its command, which tests, benchmarks and chaos start it with. */
const launchFlags = shebangNodeFlags(BIN_JS);

describe('the launch flags (apps/server/bin/idgen-server.js)', () => {
  it('bound the young generation, and the server starts with them', async () => {
    expect(launchFlags).toContain('--max-semi-space-size=16');
    const node = await startServer(['--time-source', 'none', '--metrics-listen', 'off']);
    const cmdline = readFileSync(`/proc/${node.process.pid}/cmdline`, 'utf8').split('\0');
    await node.stop();
    expect(cmdline.slice(1, 1 + launchFlags.length)).toEqual(launchFlags);
  });
});

/** `--flag=value` and `--flag value` forms as [flag, value] pairs. */
function flagsOf(args: readonly string[]): [string, string | undefined][] {
  const out: [string, string | undefined][] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] ?? '';
    if (!a.startsWith('--')) continue;
    const eq = a.indexOf('=');
    if (eq > 0) out.push([a.slice(0, eq), a.slice(eq + 1)]);
    else if (args[i + 1] !== undefined && !(args[i + 1] ?? '').startsWith('--')) out.push([a, args[++i]]);
    else out.push([a, undefined]);
  }
  return out;
}

/** Replaces the deploy files' paths with real files of the same kind, so the parser reads them as it would. */
function withRealFiles(args: string[], pki: TestPki): string[] {
  const client = pki.clients['idgen-node'];
  if (client === undefined) throw new Error('no client certificate');
  const pw = join(pki.dir, 'password');
  writeFileSync(pw, 'secret\n');
  const files: Record<string, string> = {
    '--etcd-ca': pki.caFile,
    '--etcd-cert': client.certFile,
    '--etcd-key': client.keyFile,
    '--etcd-password-file': pw,
  };
  return flagsOf(args).flatMap(([flag, value]) => {
    const replaced = files[flag] ?? value;
    return replaced === undefined ? [flag] : [flag, replaced];
  });
}

interface Container {
  args?: string[];
  env?: { name: string; value?: string }[];
  ports?: { name: string; containerPort: number }[];
  readinessProbe?: { httpGet?: { path?: string; port?: string } };
  livenessProbe?: { httpGet?: { path?: string; port?: string } };
  securityContext?: {
    allowPrivilegeEscalation?: boolean;
    readOnlyRootFilesystem?: boolean;
    capabilities?: { drop?: string[] };
  };
}

describe('deploy/kubernetes', () => {
  const docs = parseAllDocuments(readFileSync(join(DEPLOY, 'kubernetes', 'deployment.yaml'), 'utf8')).map(
    (d) => d.toJSON() as Record<string, unknown>,
  );
  const kinds = docs.map((d) => d['kind']);
  const deployment = docs.find((d) => d['kind'] === 'Deployment') as {
    spec: { template: { spec: Record<string, unknown> } };
  };
  const pod = deployment.spec.template.spec as {
    containers: Container[];
    terminationGracePeriodSeconds: number;
    securityContext: Record<string, unknown>;
  };
  const container = pod.containers[0] as Container;

  it('has a Deployment, a PodDisruptionBudget and a headless Service', () => {
    expect(kinds).toEqual(['Deployment', 'PodDisruptionBudget', 'Service']);
    const service = docs.find((d) => d['kind'] === 'Service') as { spec: { clusterIP: string } };
    expect(service.spec.clusterIP).toBe('None');
  });

  it('uses only flags and variables the server has, and they parse (the same parser)', () => {
    const args = container.args ?? [];
    for (const [flag] of flagsOf(args)) expect(flagNames).toContain(flag);
    const env: Record<string, string> = {};
    for (const e of container.env ?? []) {
      if (!e.name.startsWith('IDGEN_')) continue;
      expect(envNames).toContain(e.name);
      env[e.name] = (e.value ?? '').replace('$(POD_IP)', '10.1.2.3');
    }
    if (env['IDGEN_NODE_ID'] === undefined) env['IDGEN_NODE_ID'] = 'idgen-server-7d9f-abcde'; // from metadata.name
    const pki = makeTestPki({ clients: ['idgen-node'], name: 'deploy' });
    const argv = withRealFiles(
      args.map((a) => a.replace('REGION_CODE', '2')),
      pki,
    );
    const outcome = parseConfig(argv, env);
    if (outcome.kind !== 'config') throw new Error(`the manifest's configuration is refused: ${outcome.stderr}`);
    expect(outcome.config.lease.etcd?.auth?.username).toBe('idgen-node');
    // The ports the container declares are the ones the node listens on.
    const ports = Object.fromEntries((container.ports ?? []).map((p) => [p.name, p.containerPort]));
    expect(outcome.config.node.listen.port).toBe(ports['serving']);
    expect(outcome.config.metricsListen?.port).toBe(ports['metrics']);
    // Grace period above the shutdown timeout.
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(outcome.config.node.shutdownTimeoutMs);
  });

  it('probes /readyz for readiness and /healthz for liveness on the metrics port (mTLS on serving leaves it open), and the node answers both there', async () => {
    expect(container.readinessProbe?.httpGet).toEqual({ path: '/readyz', port: 'metrics' });
    expect(container.livenessProbe?.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    const node = await startServer(['--time-source', 'none']);
    await node.ready();
    const metricsBase = (node.metricsUrl ?? '').replace(/\/metrics$/, '');
    for (const path of ['/readyz', '/healthz']) expect((await fetch(`${metricsBase}${path}`)).status).toBe(200);
    expect((await node.stop()).code).toBe(0);
  });

  it('runs as non-root on a read-only root file system with no capabilities, etcd credentials from a Secret', () => {
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true });
    expect(container.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    const volumes = (deployment.spec.template.spec['volumes'] ?? []) as {
      name: string;
      secret?: { secretName: string };
    }[];
    expect(volumes.find((v) => v.name === 'etcd-credentials')?.secret?.secretName).toBe('idgen-etcd');
    expect((container.args ?? []).filter((a) => /^--[a-z-]*password(=|$)/.test(a))).toEqual([]); // a file, never the password
  });
});

describe('deploy/Dockerfile', () => {
  const text = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8');
  const lines = text.split('\n').filter((l) => !l.startsWith('#'));

  it('runs Node 24 slim as a non-root user, node itself as PID 1, with a /healthz check', () => {
    const froms = lines.filter((l) => l.startsWith('FROM '));
    expect(froms.length).toBeGreaterThanOrEqual(2); // multi-stage
    for (const f of froms) expect(f).toMatch(/^FROM node:24-[a-z]+-slim\b/);
    expect(lines.find((l) => l.startsWith('USER '))).toMatch(/^USER [1-9]\d*:[1-9]\d*$/);
    const entry = lines.find((l) => l.startsWith('ENTRYPOINT '));
    const argv = JSON.parse(entry?.slice('ENTRYPOINT '.length) ?? '[]') as string[];
    expect(argv[0]).toBe('node'); // exec form, no shell between SIGTERM and node
    expect(argv.slice(1, -1)).toEqual(launchFlags);
    expect(argv.at(-1)).toBe('/opt/idgen/apps/server/dist/main.js');
    expect(existsSync(MAIN_JS)).toBe(true);
    expect(text).toMatch(/HEALTHCHECK[^\n]*\n[^\n]*127\.0\.0\.1:8080\/healthz/);
  });

  it('sets only variables the server has, and exposes the ports they name', () => {
    const env = [...text.matchAll(/\b(IDGEN_[A-Z_]+)=([^\s\\]+)/g)].map((m) => [m[1] ?? '', m[2] ?? ''] as const);
    expect(env.length).toBeGreaterThan(0);
    for (const [name] of env) expect(envNames).toContain(name);
    const outcome = parseConfig(['--standalone'], Object.fromEntries(env));
    if (outcome.kind !== 'config') throw new Error(outcome.stderr);
    const exposed = (lines.find((l) => l.startsWith('EXPOSE ')) ?? '').split(/\s+/).slice(1).map(Number);
    expect(exposed).toEqual([outcome.config.node.listen.port, outcome.config.metricsListen?.port]);
  });
});

describe('deploy/systemd', () => {
  const unit = join(DEPLOY, 'systemd', 'idgen-server.service');
  const text = readFileSync(unit, 'utf8');

  function verify(file: string): { status: number | null; output: string } {
    if (findOnPath('systemd-analyze') === undefined)
      throw new Error('systemd-analyze not found: install systemd (apt-get install systemd)');
    const r = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' });
    return { status: r.status, output: `${r.stdout}${r.stderr}` };
  }

  it('passes systemd-analyze verify (and a broken copy does not, so the check can fail)', () => {
    const dir = tempDirSync('systemd').path;
    const good = join(dir, 'idgen-server.service');
    copyFileSync(unit, good);
    expect(verify(good)).toEqual({ status: 0, output: '' });
    const broken = join(dir, 'idgen-broken.service');
    writeFileSync(broken, text.replace('ExecStart=/usr/bin/node', 'ExecStart=node-without-a-path'));
    expect(verify(broken).status).not.toBe(0);
  });

  it('uses only variables and flags the server has, restarts on failure, stops after the shutdown timeout', () => {
    for (const m of text.matchAll(/^Environment=(IDGEN_[A-Z_]+)=/gm)) expect(envNames).toContain(m[1]);
    const exec = (text.match(/^ExecStart=(.*)$/m)?.[1] ?? '').split(/\s+/);
    expect(exec.slice(0, 2 + launchFlags.length)).toEqual([
      '/usr/bin/node',
      ...launchFlags,
      '/opt/idgen/apps/server/dist/main.js',
    ]);
    for (const [flag] of flagsOf(exec.slice(2 + launchFlags.length))) expect(flagNames).toContain(flag);
    expect(text).toMatch(/^Restart=on-failure$/m);
    expect(text).toMatch(/^NoNewPrivileges=yes$/m);
    expect(Number(text.match(/^TimeoutStopSec=(\d+)$/m)?.[1]) * 1000).toBeGreaterThan(defaultShutdownMs);
  });
});

describe('npm start', () => {
  it('hands SIGTERM to the node: it drains and stops instead of being orphaned', async () => {
    const port = await freePort();
    const npm = findOnPath('npm');
    if (npm === undefined) throw new Error('npm not found on PATH');
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('IDGEN_')) env[k] = v;
    Object.assign(env, {
      IDGEN_LISTEN: `127.0.0.1:${port}`,
      IDGEN_METRICS_LISTEN: 'off',
      IDGEN_STATE_FILE: standaloneStateFile(),
    });
    const proc = spawnProcess(npm, ['start', '--silent'], { cwd: REPO, env });
    await proc.waitForLine(/"msg":"ready"/, 90_000);
    proc.signal('SIGTERM'); // to npm only, as an orchestrator or a terminal sends it
    const exit = await proc.exited;
    expect(exit.code).toBe(0);
    const stopped = proc.stdoutLines.map(parseLine).find((l) => l?.msg === 'stopped');
    expect(stopped).toMatchObject({ signal: 'SIGTERM', released: true });
    // Nothing is left listening on the port.
    expect(
      execFileSync(process.execPath, [
        '-e',
        `require('net').connect(${port},'127.0.0.1').on('error',()=>process.exit(0)).on('connect',()=>process.exit(1))`,
      ]).length,
    ).toBe(0);
  });
});
