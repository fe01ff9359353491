import { execFile } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startEtcd, startEtcdCluster } from './etcd.js';
import type { EtcdCluster, EtcdServer } from './etcd.js';
import { freePort, tempDir } from './net.js';
import { spawnProcess } from './process.js';
import type { ProcessExit, ProcessHandle } from './process.js';
import { track } from './registry.js';
import { serverLaunchArgs } from './server-launch.js';
import { makeTestPki } from './tls.js';
import type { TestCertificate, TestPki } from './tls.js';

/**
 * A whole idgen deployment on loopback, for tests and for a person to poke at (issue 22): one etcd (or a 3-member
 * cluster) per region with client TLS and the users and roles of `deploy/etcd/roles.sh`, each bound to its code
 * with the real `idgen region init`, and K real `idgen-server` processes per region serving TLS with mTLS. idgen
 * is driven only through its built CLI and server (`apps/cli/dist/main.js`, `apps/server/dist/main.js`) and etcd
 * through `etcdctl`: the harness imports no idgen package (they depend on it).
 */

/** The etcd users of a region: `root`, and the three of `deploy/etcd/roles.sh`, each with the role of its name. */
export type DeploymentUserName = 'root' | 'idgen-node' | 'idgen-operator' | 'idgen-spare-admin';
export const DEPLOYMENT_USERS: readonly DeploymentUserName[] = [
  'root',
  'idgen-node',
  'idgen-operator',
  'idgen-spare-admin',
];

/** The common name of the client certificate every etcd connection presents (not an etcd user: see below). */
export const ETCD_CLIENT_CN = 'idgen-etcd-client';
/** The common name of the callers' client certificate, the one name the nodes' `--tls-client-names` allows. */
export const CALLER_CN = 'idgen-caller';

/** A command to spawn per region for embedded callers (or any other caller); see {@link StartDeploymentOptions.callers}. */
export interface DeploymentCallerCommand {
  readonly command: string;
  readonly args: readonly string[];
  /** Added to the parent's environment (less its `IDGEN_*`). */
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
}

/** Options of {@link startDeployment}. */
export interface StartDeploymentOptions {
  /** How many regions (codes 0..n-1; default 5), or the codes themselves. */
  regions?: number | readonly number[];
  /** Generator nodes per region; default 2. */
  nodesPerRegion?: number;
  /** Give one region a multi-member etcd cluster (default 3 members); the others get one member each. */
  cluster?: { region: number; members?: number };
  /** Key prefix (`--etcd-prefix`, roles.sh's first argument); default `/idgen`. */
  prefix?: string;
  /** `--lease-ttl` of every node, seconds (2-60); default 3. */
  leaseTtlSeconds?: number;
  /** More flags for every node (e.g. `['--log-level', 'warn']`). */
  serverArgs?: readonly string[];
  /**
   * Callers spawned per region after its nodes are ready (`perRegion` each, default 1), e.g. a script of the
   * caller's own that uses @idgen/embedded: the harness cannot import it, so the command is the caller's. They
   * are stopped (SIGTERM) first on `stop()`; nothing waits for them to be ready.
   */
  callers?: {
    perRegion?: number;
    command(region: DeploymentRegion, index: number, deployment: Deployment): DeploymentCallerCommand;
  };
  /** The repository root (with `apps/cli/dist` and `apps/server/dist` built); default found from this file. */
  repoRoot?: string;
  /** How long each node may take to answer `/readyz` 200; default 90000 ms (a loaded 2-core machine). */
  nodeReadyTimeoutMs?: number;
  /** Progress lines (e.g. `console.error`); default none. */
  log?: (line: string) => void;
}

/** An etcd user of a region: its name and the file holding its password (mode 600, one line). */
export interface DeploymentUser {
  readonly name: DeploymentUserName;
  readonly passwordFile: string;
}

/** One running (or stopped) `idgen-server` of a deployment. */
export interface DeploymentNode {
  readonly region: number;
  readonly index: number;
  /** `--node-id`: `r{region}-n{index}`. */
  readonly nodeId: string;
  /** `127.0.0.1:PORT` of the serving port (TLS, mTLS); the same across restarts. */
  readonly address: string;
  /** `https://127.0.0.1:PORT`. */
  readonly url: string;
  /** `127.0.0.1:PORT` of the plain-HTTP metrics listener (`/metrics`, `/healthz`, `/readyz`). */
  readonly metricsAddress: string;
  /** `http://127.0.0.1:PORT`. */
  readonly metricsUrl: string;
  /** Pid of the current process (changes on restart). */
  readonly pid: number;
  readonly process: ProcessHandle;
  /** The node's argv after `node` (launch flags, main.js, flags). */
  readonly args: readonly string[];
  running(): boolean;
  /** SIGTERM: drains and releases its slot; waits (SIGKILL after 10 s). */
  stop(): Promise<ProcessExit>;
  /** SIGKILL: the slot stays leased until its TTL runs out. */
  kill(): Promise<ProcessExit>;
  /** SIGSTOP: a stalled node (its lease runs out, it fences). */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Stops it (SIGTERM, or SIGKILL with `hard`) if it runs, starts it again on the same ports, waits for `/readyz`. */
  restart(options?: { hard?: boolean }): Promise<void>;
}

/** The TLS material a caller of the nodes holds. */
export interface DeploymentCaller {
  /** The client certificate (CN {@link CALLER_CN}) and key the nodes accept. */
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: string;
  readonly key: string;
  /** The CA that signed the nodes' serving certificates. */
  readonly caFile: string;
  readonly ca: string;
}

/** One region of a deployment. */
export interface DeploymentRegion {
  readonly code: number;
  readonly etcd: {
    /** Client URLs (`https://127.0.0.1:PORT`), one per member. */
    readonly endpoints: readonly string[];
    /** The CA that signed etcd's server certificate. */
    readonly caFile: string;
    /** The client certificate etcd requires (`--client-cert-auth`), and its key. */
    readonly certFile: string;
    readonly keyFile: string;
    /** The harness's handle: a single member or a cluster. */
    readonly server: EtcdServer | EtcdCluster;
  };
  readonly users: Readonly<Record<DeploymentUserName, DeploymentUser>>;
  readonly nodes: readonly DeploymentNode[];
  readonly caller: DeploymentCaller;
  /** The processes of {@link StartDeploymentOptions.callers}. */
  readonly callers: readonly ProcessHandle[];
  /** Secrets and etcd data of this region. */
  readonly dir: string;
}

/** The result of {@link Deployment.cli}. */
export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** A running deployment. */
export interface Deployment {
  /** The temp dir holding everything (PKI, secrets, etcd data); removed on `stop()`. */
  readonly dir: string;
  readonly prefix: string;
  /** The one PKI: etcd and the nodes serve `pki.server`; clients {@link ETCD_CLIENT_CN} and {@link CALLER_CN}. */
  readonly pki: TestPki;
  readonly regions: readonly DeploymentRegion[];
  /** The region with that code; throws for another. */
  region(code: number): DeploymentRegion;
  /**
   * The etcd flags an operator passes to `idgen` for `region` as `user` (default `idgen-operator`):
   * `--etcd`, `--etcd-ca`, `--etcd-cert`, `--etcd-key`, `--etcd-user`, `--etcd-password-file` (and `--etcd-prefix`
   * when not `/idgen`).
   */
  cliArgs(region: number, user?: DeploymentUserName): string[];
  /** Runs the built CLI (`node apps/cli/dist/main.js ...args`); never rejects on a non-zero exit. */
  cli(args: readonly string[], timeoutMs?: number): Promise<CliResult>;
  /** The pids of every process of it still running (etcd members, nodes, callers). */
  pids(): number[];
  /** Stops every process and removes every temp dir; idempotent; also called by `cleanupAll()`. */
  stop(): Promise<void>;
}

/** etcdctl's timeouts for the set-up calls (defaults 2 s and 5 s): generous, for a loaded machine. */
const ETCDCTL_TIMEOUTS = ['--dial-timeout=10s', '--command-timeout=30s'];

function run(
  command: string,
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { env: options.env ?? process.env, timeout: options.timeoutMs ?? 60_000, encoding: 'utf8' },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
        resolve({ code, stdout, stderr: error !== null && stderr === '' ? error.message : stderr });
      },
    );
  });
}

async function mustRun(what: string, command: string, args: readonly string[], env?: NodeJS.ProcessEnv) {
  const r = await run(command, args, env === undefined ? {} : { env });
  if (r.code !== 0) throw new Error(`${what} failed (exit ${r.code}):\n${r.stderr}${r.stdout}`);
  return r;
}

function withoutIdgenEnv(): NodeJS.ProcessEnv {
  const clean: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('IDGEN_')) clean[k] = v;
  return clean;
}

function regionCodes(regions: StartDeploymentOptions['regions']): number[] {
  const codes = typeof regions === 'number' || regions === undefined ? [...Array(regions ?? 5).keys()] : [...regions];
  if (codes.length === 0) throw new Error('startDeployment: no regions');
  for (const c of codes) {
    if (!Number.isInteger(c) || c < 0 || c > 7) throw new Error(`startDeployment: region code ${c} is not 0-7`);
  }
  if (new Set(codes).size !== codes.length) throw new Error(`startDeployment: region codes repeat: ${codes.join(',')}`);
  return codes;
}

function pidAlive(pid: number): boolean {
  if (pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function readyzOk(metricsUrl: string): Promise<boolean> {
  try {
    const res = await fetch(`${metricsUrl}/readyz`, { signal: AbortSignal.timeout(1000) });
    await res.text();
    return res.status === 200;
  } catch {
    return false;
  }
}

/** What every stage of a deployment's start shares: where things are, the PKI, what to tear down. */
interface DeploymentContext {
  readonly root: { readonly path: string };
  readonly prefix: string;
  readonly leaseTtl: number;
  readonly readyTimeoutMs: number;
  readonly cliMain: string;
  readonly rolesScript: string;
  /** `node`'s argv before the server's flags (launch flags and main.js). */
  readonly launch: readonly string[];
  readonly serverArgs: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  readonly pki: TestPki;
  readonly etcdClient: TestCertificate;
  readonly caller: DeploymentCaller;
  readonly etcds: (EtcdServer | EtcdCluster)[];
  readonly nodes: DeploymentNodeProcess[];
  readonly log: (line: string) => void;
  readonly started: number;
}

/** The etcd flags of the CLI and the server for `region` as `user`. */
function etcdFlags(prefix: string, region: DeploymentRegion, user: DeploymentUserName): string[] {
  return [
    '--etcd',
    region.etcd.endpoints.join(','),
    ...(prefix === '/idgen' ? [] : ['--etcd-prefix', prefix]),
    '--etcd-ca',
    region.etcd.caFile,
    '--etcd-cert',
    region.etcd.certFile,
    '--etcd-key',
    region.etcd.keyFile,
    '--etcd-user',
    user,
    '--etcd-password-file',
    region.users[user].passwordFile,
  ];
}

/** The built CLI and server and roles.sh, or an error saying how to get them. */
function builtParts(repoRoot: string): { cliMain: string; serverMain: string; rolesScript: string } {
  const parts = {
    cliMain: join(repoRoot, 'apps', 'cli', 'dist', 'main.js'),
    serverMain: join(repoRoot, 'apps', 'server', 'dist', 'main.js'),
    rolesScript: join(repoRoot, 'deploy', 'etcd', 'roles.sh'),
  };
  for (const [file, how] of [
    [parts.cliMain, 'npx nx run @idgen/cli:build'],
    [parts.serverMain, 'npx nx run @idgen/server:build'],
    [parts.rolesScript, 'it is part of the repository'],
  ] as const) {
    if (!existsSync(file)) throw new Error(`startDeployment: ${file} is missing (${how})`);
  }
  return parts;
}

/** Runs `start` for every item at once; after all settled, the first failure rejects (the caller tears down). */
async function stage<T, R>(items: readonly T[], start: (item: T) => Promise<R>): Promise<R[]> {
  const results = await Promise.allSettled(items.map(start));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<R>).value);
}

type MutableRegion = DeploymentRegion & { nodes: DeploymentNode[]; callers: ProcessHandle[] };

/**
 * One region's etcd (a member, or a cluster of `members`) with client TLS, users and roles as docs/runbook.md has
 * them (root first and auth on, then the real roles.sh as root, then one user per role), bound to `code` with the
 * real `idgen region init` as root.
 */
async function startRegion(ctx: DeploymentContext, code: number, members: number): Promise<MutableRegion> {
  const { pki, etcdClient, prefix } = ctx;
  const dir = join(ctx.root.path, `region-${code}`);
  const secrets = join(dir, 'secrets');
  await mkdir(secrets, { recursive: true, mode: 0o700 });
  const tls = { pki, clientCertAuth: true };
  // Every etcdctl call as a user checks a bcrypt hash: at etcd's cost 10 a few dozen of them at once on a loaded
  // 2-core machine ran past etcdctl's 5 s; a test etcd's passwords need no strength.
  const extraArgs = ['--bcrypt-cost', '4'];
  const server =
    members > 1
      ? await startEtcdCluster(members, { tls, extraArgs, parentDir: join(dir, 'etcd') })
      : await startEtcd({ tls, extraArgs, dataDir: join(dir, 'etcd'), name: `region-${code}` });
  ctx.etcds.push(server);
  const endpoints = 'stopAll' in server ? [...server.endpoints] : [server.clientUrl];

  const passwords = {} as Record<DeploymentUserName, string>;
  const users = {} as Record<DeploymentUserName, DeploymentUser>;
  for (const name of DEPLOYMENT_USERS) {
    passwords[name] = randomBytes(12).toString('hex');
    const passwordFile = join(secrets, `${name}.password`);
    writeFileSync(passwordFile, `${passwords[name]}\n`, { mode: 0o600 });
    users[name] = { name, passwordFile };
  }
  // The etcd client certificate's CN is no user, so a client with the certificate but without a user is refused
  // (etcd would take the CN as the user).
  const tlsFlags = ['--cacert', pki.caFile, '--cert', etcdClient.certFile, '--key', etcdClient.keyFile];
  const ctl = (args: readonly string[], asRoot: boolean): Promise<CliResult> =>
    mustRun(`etcdctl ${args.slice(0, 2).join(' ')} (region ${code})`, 'etcdctl', [
      '--endpoints',
      endpoints.join(','),
      ...tlsFlags,
      ...ETCDCTL_TIMEOUTS,
      ...(asRoot ? ['--user', 'root', '--password', passwords.root] : []),
      ...args,
    ]);
  await ctl(['user', 'add', 'root', `--new-user-password=${passwords.root}`, '--interactive=false'], false);
  await ctl(['user', 'grant-role', 'root', 'root'], false);
  await ctl(['auth', 'enable'], false);
  await mustRun(`deploy/etcd/roles.sh (region ${code})`, 'bash', [ctx.rolesScript, prefix], {
    ...process.env,
    ETCDCTL_API: '3',
    ETCDCTL_ENDPOINTS: endpoints.join(','),
    ETCDCTL_CACERT: pki.caFile,
    ETCDCTL_CERT: etcdClient.certFile,
    ETCDCTL_KEY: etcdClient.keyFile,
    ETCDCTL_USER: 'root',
    ETCDCTL_PASSWORD: passwords.root,
    ETCDCTL_DIAL_TIMEOUT: '10s',
    ETCDCTL_COMMAND_TIMEOUT: '30s',
  });
  for (const name of DEPLOYMENT_USERS.filter((u) => u !== 'root')) {
    await ctl(['user', 'add', name, `--new-user-password=${passwords[name]}`, '--interactive=false'], true);
    await ctl(['user', 'grant-role', name, name], true);
  }
  const region: MutableRegion = {
    code,
    etcd: { endpoints, caFile: pki.caFile, certFile: etcdClient.certFile, keyFile: etcdClient.keyFile, server },
    users,
    nodes: [],
    caller: ctx.caller,
    callers: [],
    dir,
  };
  // Bound with the real CLI as root, before the region's first node (docs/runbook.md).
  await mustRun(`idgen region init --region ${code}`, process.execPath, [
    ctx.cliMain,
    'region',
    'init',
    '--sole-cluster',
    '--region',
    String(code),
    ...etcdFlags(prefix, region, 'root'),
  ]);
  ctx.log(`region ${code}: etcd ${endpoints.join(',')} bound (${Date.now() - ctx.started} ms)`);
  return region;
}

/** A node's readiness wait failed; `portTaken`: its port was taken meanwhile (spawned again on a restart). */
class NodeStartError extends Error {
  constructor(
    message: string,
    readonly portTaken: boolean,
  ) {
    super(message);
  }
}

/** One `idgen-server` of a deployment: TLS with mTLS on its serving port, a plain metrics port, same across restarts. */
class DeploymentNodeProcess implements DeploymentNode {
  readonly address: string;
  readonly url: string;
  readonly metricsAddress: string;
  readonly metricsUrl: string;
  readonly nodeId: string;
  private proc: ProcessHandle;
  private halted = false;

  constructor(
    private readonly ctx: DeploymentContext,
    readonly region: number,
    readonly index: number,
    port: number,
    metricsPort: number,
    readonly args: readonly string[],
  ) {
    this.nodeId = `r${region}-n${index}`;
    this.address = `127.0.0.1:${port}`;
    this.url = `https://127.0.0.1:${port}`;
    this.metricsAddress = `127.0.0.1:${metricsPort}`;
    this.metricsUrl = `http://127.0.0.1:${metricsPort}`;
    this.proc = this.spawn();
  }

  get pid(): number {
    return this.proc.pid;
  }
  get process(): ProcessHandle {
    return this.proc;
  }
  running(): boolean {
    return this.proc.exitStatus() === undefined;
  }
  stop(): Promise<ProcessExit> {
    return this.proc.stop(10_000);
  }
  kill(): Promise<ProcessExit> {
    return this.proc.kill();
  }
  pause(): void {
    this.proc.signal('SIGSTOP');
  }
  resume(): void {
    this.proc.signal('SIGCONT');
  }
  async restart(o: { hard?: boolean } = {}): Promise<void> {
    if (this.halted) throw new Error(`node ${this.nodeId}: the deployment was stopped`);
    if (o.hard === true) await this.proc.kill();
    else await this.proc.stop(10_000);
    await this.spawnReady();
  }
  /** Stops it for good (the deployment's stop). */
  async halt(): Promise<void> {
    this.halted = true;
    await this.proc.stop(10_000);
  }

  /** Waits for the first spawn's `/readyz`; a port taken meanwhile is tried again. */
  async firstReady(): Promise<void> {
    try {
      await this.waitReady();
    } catch (e) {
      if (!(e instanceof NodeStartError) || !e.portTaken) throw e;
      await this.spawnReady();
    }
  }

  private spawn(): ProcessHandle {
    return spawnProcess(process.execPath, this.args, { env: this.ctx.env, maxLines: 2000 });
  }

  private async waitReady(): Promise<void> {
    const { readyTimeoutMs } = this.ctx;
    const what = `node ${this.nodeId}`;
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      const ended = this.proc.exitStatus();
      if (ended !== undefined)
        throw new NodeStartError(
          `${what} exited before /readyz was 200 (code ${ended.code}, signal ${ended.signal}); last output:\n${this.proc.tail(15)}`,
          this.proc.lines.some((l) => l.includes('EADDRINUSE')),
        );
      if (await readyzOk(this.metricsUrl)) return;
      if (Date.now() > deadline)
        throw new Error(
          `${what}: ${this.metricsUrl}/readyz not 200 after ${readyTimeoutMs} ms; last output:\n${this.proc.tail(15)}`,
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Spawns and waits until ready; a port taken meanwhile by another socket (on a restart) is tried again. */
  private async spawnReady(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      if (this.halted) throw new Error(`node ${this.nodeId}: the deployment was stopped`);
      this.proc = this.spawn();
      try {
        await this.waitReady();
        return;
      } catch (e) {
        if (!(e instanceof NodeStartError) || !e.portTaken || attempt >= 20) throw e;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }
}

/** Starts node `index` of `region` and waits until it is ready. */
async function startNode(ctx: DeploymentContext, region: DeploymentRegion, index: number): Promise<DeploymentNode> {
  const port = await freePort();
  const metricsPort = await freePort();
  const { pki } = ctx;
  const args = [
    ...ctx.launch,
    '--region',
    String(region.code),
    ...etcdFlags(ctx.prefix, region, 'idgen-node'),
    '--tls-cert',
    pki.server.certFile,
    '--tls-key',
    pki.server.keyFile,
    '--tls-client-ca',
    pki.caFile,
    '--tls-client-names',
    CALLER_CN,
    '--listen',
    `127.0.0.1:${port}`,
    '--metrics-listen',
    `127.0.0.1:${metricsPort}`,
    '--time-source',
    'none',
    '--lease-ttl',
    String(ctx.leaseTtl),
    '--node-id',
    `r${region.code}-n${index}`,
    ...ctx.serverArgs,
  ];
  const node = new DeploymentNodeProcess(ctx, region.code, index, port, metricsPort, args);
  ctx.nodes.push(node);
  await node.firstReady();
  return node;
}

/** The PKI of a deployment: etcd and the nodes serve `pki.server`; clients {@link ETCD_CLIENT_CN}, {@link CALLER_CN}. */
function deploymentPki(root: string): { pki: TestPki; etcdClient: TestCertificate; caller: DeploymentCaller } {
  const pki = makeTestPki({ dir: join(root, 'pki'), name: 'deployment', clients: [ETCD_CLIENT_CN, CALLER_CN] });
  const callerCert = pki.clients[CALLER_CN] as TestCertificate;
  return {
    pki,
    etcdClient: pki.clients[ETCD_CLIENT_CN] as TestCertificate,
    caller: {
      certFile: callerCert.certFile,
      keyFile: callerCert.keyFile,
      cert: callerCert.cert,
      key: callerCert.key,
      caFile: pki.caFile,
      ca: pki.ca,
    },
  };
}

/**
 * Starts a deployment (see the file comment): PKI, per region an etcd with TLS and auth (roles.sh), `region init`,
 * then the nodes, all regions at once; resolves when every node's `/readyz` is 200. On any failure everything
 * started so far is torn down before it rejects. Needs `etcd`, `etcdctl`, `openssl`, `bash` and the built CLI and
 * server.
 */
export async function startDeployment(options: StartDeploymentOptions = {}): Promise<Deployment> {
  const codes = regionCodes(options.regions);
  const nodesPerRegion = options.nodesPerRegion ?? 2;
  const { cliMain, serverMain, rolesScript } = builtParts(options.repoRoot ?? join(__dirname, '..', '..', '..'));
  if (options.cluster !== undefined && !codes.includes(options.cluster.region)) {
    throw new Error(`startDeployment: cluster region ${options.cluster.region} is not one of ${codes.join(',')}`);
  }
  const root = await tempDir('idgen-deployment');
  const etcds: (EtcdServer | EtcdCluster)[] = [];
  const nodes: DeploymentNodeProcess[] = [];
  const callerProcs: ProcessHandle[] = [];
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      untrack();
      await Promise.allSettled(callerProcs.map((p) => p.stop(5000)));
      await Promise.allSettled(nodes.map((n) => n.halt()));
      await Promise.allSettled(etcds.map((e) => ('stopAll' in e ? e.stopAll() : e.stop())));
      await root.remove();
    })();
    return stopping;
  };
  const untrack = track({ cleanup: stop, cleanupSync: () => rmSync(root.path, { recursive: true, force: true }) });

  try {
    const started = Date.now();
    const ctx: DeploymentContext = {
      root: root,
      prefix: options.prefix ?? '/idgen',
      leaseTtl: options.leaseTtlSeconds ?? 3,
      readyTimeoutMs: options.nodeReadyTimeoutMs ?? 90_000,
      cliMain,
      rolesScript,
      launch: serverLaunchArgs(serverMain),
      serverArgs: options.serverArgs ?? [],
      env: withoutIdgenEnv(),
      ...deploymentPki(root.path),
      etcds,
      nodes,
      log: options.log ?? ((): void => undefined),
      started,
    };
    ctx.log(`pki in ${ctx.pki.dir} (${Date.now() - started} ms)`);
    const regions = await stage(codes, (code) =>
      startRegion(ctx, code, options.cluster?.region === code ? (options.cluster.members ?? 3) : 1),
    );
    await stage(regions, async (region) => {
      region.nodes.push(...(await stage([...Array(nodesPerRegion).keys()], (i) => startNode(ctx, region, i))));
      ctx.log(
        `region ${region.code}: ${region.nodes.length} nodes ready: ${region.nodes.map((n) => n.address).join(' ')} (${Date.now() - started} ms)`,
      );
    });

    const deployment: Deployment = {
      dir: root.path,
      prefix: ctx.prefix,
      pki: ctx.pki,
      regions,
      region(code) {
        const r = regions.find((x) => x.code === code);
        if (r === undefined) throw new Error(`no region ${code} in this deployment (${codes.join(',')})`);
        return r;
      },
      cliArgs: (code, user = 'idgen-operator') => etcdFlags(ctx.prefix, deployment.region(code), user),
      cli: (args, timeoutMs = 30_000) => run(process.execPath, [cliMain, ...args], { env: ctx.env, timeoutMs }),
      pids() {
        const pids: number[] = [];
        for (const e of etcds) {
          if ('stopAll' in e) pids.push(...e.members.map((m) => m.pid));
          else pids.push(e.pid);
        }
        pids.push(...nodes.map((n) => n.pid), ...callerProcs.map((p) => p.pid));
        return pids.filter(pidAlive);
      },
      stop,
    };
    if (options.callers !== undefined) callerProcs.push(...spawnCallers(ctx, regions, deployment, options.callers));
    ctx.log(`deployment ready in ${Date.now() - started} ms`);
    return deployment;
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The processes of {@link StartDeploymentOptions.callers}, per region, recorded on each region too. */
function spawnCallers(
  ctx: DeploymentContext,
  regions: readonly MutableRegion[],
  deployment: Deployment,
  spec: NonNullable<StartDeploymentOptions['callers']>,
): ProcessHandle[] {
  const all: ProcessHandle[] = [];
  for (const region of regions) {
    for (let i = 0; i < (spec.perRegion ?? 1); i++) {
      const c = spec.command(region, i, deployment);
      const proc = spawnProcess(c.command, c.args, {
        env: { ...ctx.env, ...c.env },
        ...(c.cwd === undefined ? {} : { cwd: c.cwd }),
      });
      all.push(proc);
      region.callers.push(proc);
    }
  }
  return all;
}
