// The deploy files (deploy/) checked against the server's own configuration parser, so they cannot drift:
// every kustomize overlay (one per region) rendered with `kubectl kustomize` and validated against the Kubernetes
// schemas, and its flags, variables, ports, probes and selectors checked against the parser; the Dockerfile's
// base argument, user, entrypoint and health check; the systemd unit under `systemd-analyze verify` in a root
// holding its paths, its readiness wait against a real node; `npm start` hands SIGTERM to the node.
// The image itself is built and run by `npm run image` (tools/scripts/image.mjs).
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health, HealthCheckResponse_ServingStatus } from '@idgen/proto';
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
import { CONFIG_ERROR_EXIT_CODE, FLAGS, parseConfig } from '../src/config.js';
import {
  BIN_JS,
  MAIN_JS,
  parseLine,
  rawGrpc,
  spawnServer,
  standaloneStateFile,
  startServer,
  waitFor,
} from './support.test-helper.js';

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

/** A rendered Kubernetes object, as much of it as these checks read. */
interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

interface Probe {
  httpGet?: { path?: string; port?: string | number };
  grpc?: { port: number; service?: string };
}

interface Container {
  args?: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
  envFrom?: { configMapRef?: { name: string } }[];
  ports?: { name: string; containerPort: number }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  volumeMounts?: { name: string; mountPath: string }[];
  securityContext?: {
    allowPrivilegeEscalation?: boolean;
    readOnlyRootFilesystem?: boolean;
    runAsNonRoot?: boolean;
    privileged?: boolean;
    capabilities?: { drop?: string[]; add?: string[] };
    seccompProfile?: { type: string };
  };
}

interface Volume {
  name: string;
  secret?: { secretName: string; items?: { key: string; path: string }[] };
  [source: string]: unknown;
}

interface PodSpec {
  containers: Container[];
  volumes?: Volume[];
  terminationGracePeriodSeconds: number;
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; seccompProfile?: { type: string } };
  topologySpreadConstraints?: {
    topologyKey: string;
    maxSkew: number;
    labelSelector?: { matchLabels?: Record<string, string> };
  }[];
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
}

const KUBERNETES = join(DEPLOY, 'kubernetes');
const REGIONS = [0, 1, 2, 3, 4];
const VALIDATE = join(REPO, 'tools', 'scripts', 'k8s-validate.mjs');

/** `kubectl kustomize dir`: the objects an operator would apply. */
function render(dir: string): K8sObject[] {
  if (findOnPath('kubectl') === undefined)
    throw new Error(
      "kubectl not found: it renders the overlays (kubectl kustomize; kubectl 1.27 or later, whose kustomize is v5: Debian's kubernetes-client 1.20 is too old)",
    );
  const yaml = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return parseAllDocuments(yaml).map((d) => d.toJSON() as K8sObject);
}

/** Each object checked against the Kubernetes schemas (kubernetes-models, tools/scripts/k8s-validate.mjs). */
function schemaProblems(objects: readonly K8sObject[]): { kind: string; name: string; problem: string }[] {
  const r = spawnSync(process.execPath, [VALIDATE], { input: JSON.stringify(objects), encoding: 'utf8', cwd: REPO });
  if (r.status !== 0) throw new Error(`k8s-validate.mjs failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as { kind: string; name: string; problem: string }[];
}

function only(objects: readonly K8sObject[], kind: string): K8sObject {
  const found = objects.filter((o) => o.kind === kind);
  if (found.length !== 1) throw new Error(`expected one ${kind}, got ${found.length}`);
  return found[0] as K8sObject;
}

const podSpecOf = (objects: readonly K8sObject[]): PodSpec =>
  (only(objects, 'Deployment')['spec'] as { template: { spec: PodSpec } }).template.spec;

/**
 * Pod Security "restricted" (kubernetes.io/docs/concepts/security/pod-security-standards), the rules a
 * Deployment's pod can break: host namespaces, volume types, privilege, capabilities, non-root, seccomp.
 */
function restrictedViolations(pod: PodSpec): string[] {
  const out: string[] = [];
  const allowedVolumes = new Set([
    'configMap',
    'csi',
    'downwardAPI',
    'emptyDir',
    'ephemeral',
    'persistentVolumeClaim',
    'projected',
    'secret',
  ]);
  if (pod.hostNetwork === true || pod.hostPID === true || pod.hostIPC === true) out.push('host namespaces');
  for (const v of pod.volumes ?? [])
    for (const source of Object.keys(v))
      if (source !== 'name' && !allowedVolumes.has(source)) out.push(`volume ${v.name}: ${source}`);
  for (const c of pod.containers) {
    const sc = c.securityContext ?? {};
    if (sc.privileged === true) out.push('privileged');
    if (sc.allowPrivilegeEscalation !== false) out.push('allowPrivilegeEscalation not false');
    if (!(sc.capabilities?.drop ?? []).includes('ALL')) out.push('capabilities not dropped');
    for (const cap of sc.capabilities?.add ?? []) if (cap !== 'NET_BIND_SERVICE') out.push(`capability ${cap}`);
    if ((sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot) !== true) out.push('runAsNonRoot not true');
    const seccomp = sc.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type;
    if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost') out.push('no seccomp profile');
  }
  if (pod.securityContext?.runAsUser === 0) out.push('runAsUser 0');
  return out;
}

/** Test files for the Secrets' keys, by Secret: what a mounted path in an argument is replaced with. */
function secretFiles(pki: TestPki): Record<string, Record<string, string>> {
  const client = pki.clients['idgen-node'];
  if (client === undefined) throw new Error('no client certificate');
  const password = join(pki.dir, 'password');
  writeFileSync(password, 'secret\n');
  return {
    etcd: { 'ca.crt': pki.caFile, 'tls.crt': client.certFile, 'tls.key': client.keyFile, password },
    serving: { 'tls.crt': pki.server.certFile, 'tls.key': pki.server.keyFile, 'ca.crt': pki.caFile },
  };
}

/**
 * The container's command line and environment as the kubelet would give them, with each path that lies in a
 * mounted Secret replaced by a real file of the same kind (the Secret's volume must list the key): env values
 * with `$(VAR)` expanded, fieldRefs filled in, envFrom read from the rendered ConfigMap.
 */
function kubeletView(objects: readonly K8sObject[], pki: TestPki): { argv: string[]; env: Record<string, string> } {
  const pod = podSpecOf(objects);
  const container = pod.containers[0] as Container;
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    const name = from.configMapRef?.name;
    const map = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === name);
    if (map === undefined) throw new Error(`envFrom names ConfigMap ${name}, which the overlay does not render`);
    Object.assign(env, map['data'] as Record<string, string>);
  }
  const fields: Record<string, string> = { 'metadata.name': 'idgen-server-r2-7d9f-abcde', 'status.podIP': '10.1.2.3' };
  for (const e of container.env ?? []) {
    const ref = e.valueFrom?.fieldRef?.fieldPath;
    if (ref !== undefined && fields[ref] === undefined) throw new Error(`no test value for fieldRef ${ref}`);
    env[e.name] =
      ref !== undefined
        ? (fields[ref] as string)
        : (e.value ?? '').replace(/\$\((\w+)\)/g, (_, v: string) => env[v] ?? '');
  }
  const files = secretFiles(pki);
  const mounted = (path: string): string => {
    const mount = (container.volumeMounts ?? []).find((m) => path.startsWith(`${m.mountPath}/`));
    const volume = (pod.volumes ?? []).find((v) => v.name === mount?.name);
    const item = volume?.secret?.items?.find((i) => `${mount?.mountPath}/${i.path}` === path);
    const kind = volume?.name === 'etcd-credentials' ? 'etcd' : volume?.name === 'serving-tls' ? 'serving' : '';
    const file = item === undefined ? undefined : files[kind]?.[item.key];
    if (file === undefined) throw new Error(`${path} is not a key of a mounted Secret`);
    return file;
  };
  const argv = flagsOf(container.args ?? []).flatMap(([flag, value]) =>
    value === undefined ? [flag] : [flag, value.startsWith('/etc/idgen/') ? mounted(value) : value],
  );
  for (const [name, value] of Object.entries(env)) if (value.startsWith('/etc/idgen/')) env[name] = mounted(value);
  return { argv, env };
}

/**
 * What is wrong with one region's rendered objects against the server's own parser: unknown flags or IDGEN_*
 * variables, a configuration the parser refuses, ports, probes and selectors that miss what the node serves.
 */
function configProblems(
  objects: readonly K8sObject[],
  region: number,
  pki: TestPki,
  serving: 'mtls' | 'mesh' = 'mtls',
): string[] {
  const out: string[] = [];
  const pod = podSpecOf(objects);
  const container = pod.containers[0] as Container;
  for (const [flag] of flagsOf(container.args ?? [])) if (!flagNames.has(flag)) out.push(`unknown flag ${flag}`);
  const { argv, env } = kubeletView(objects, pki);
  for (const name of Object.keys(env))
    if (name.startsWith('IDGEN_') && !envNames.has(name)) out.push(`unknown variable ${name}`);
  const outcome = parseConfig(argv, env);
  if (outcome.kind !== 'config') return [...out, `refused: ${outcome.stderr.trim()}`];
  const config = outcome.config;
  if (config.region !== region) out.push(`region ${config.region}, not ${region}`);
  if (config.lease.etcd?.auth?.username !== 'idgen-node') out.push('etcd user is not idgen-node');
  // mTLS on the serving port, or (components/mesh-tls) plaintext behind a sidecar that authenticates callers.
  if (serving === 'mtls' && config.node.tls?.clientCaFile === undefined) out.push('serving without mTLS');
  if (serving === 'mesh' && (config.node.tls !== undefined || config.node.statusDetails !== 'full'))
    out.push('mesh serving is not plaintext with full status details');
  const ports = Object.fromEntries((container.ports ?? []).map((p) => [p.name, p.containerPort]));
  if (config.node.listen.port !== ports['serving'])
    out.push(`serving port ${config.node.listen.port} is not the container's`);
  if (config.metricsListen?.port !== ports['metrics'])
    out.push(`metrics port ${config.metricsListen?.port} is not the container's`);
  if (config.node.advertise !== `10.1.2.3:${ports['serving']}`) out.push(`advertise ${config.node.advertise}`);
  // Probes on the metrics port, which answers /readyz and /healthz for a TLS serving port (see below); behind a
  // mesh, the kubelet's native grpc: probe on grpc.health.v1 at the serving port's number.
  const probe = (p: Probe | undefined): string =>
    p?.grpc !== undefined
      ? `grpc.health.v1 on ${p.grpc.port}`
      : `${p?.httpGet?.path ?? ''} on ${String(p?.httpGet?.port ?? '')}`;
  const readiness = serving === 'mtls' ? '/readyz on metrics' : `grpc.health.v1 on ${config.node.listen.port}`;
  if (probe(container.readinessProbe) !== readiness) out.push(`readiness ${probe(container.readinessProbe)}`);
  if (probe(container.livenessProbe) !== '/healthz on metrics') out.push(`liveness ${probe(container.livenessProbe)}`);
  if (pod.terminationGracePeriodSeconds * 1000 <= config.node.shutdownTimeoutMs)
    out.push('grace period below the shutdown timeout');
  // Every port a Service or NetworkPolicy names is one the container declares.
  const service = only(objects, 'Service')['spec'] as { ports: { targetPort: string; port: number }[] };
  for (const p of service.ports) if (ports[p.targetPort] !== p.port) out.push(`Service port ${p.targetPort}:${p.port}`);
  const policy = only(objects, 'NetworkPolicy')['spec'] as {
    ingress: { from: { podSelector?: { matchLabels?: Record<string, string> } }[]; ports: { port: string }[] }[];
  };
  const allowed = policy.ingress.map(
    (rule) =>
      `${rule.ports.map((p) => p.port).join()} from ${JSON.stringify(rule.from.map((f) => f.podSelector?.matchLabels))}`,
  );
  const expected = ['serving from [{"idgen.dev/caller":"true"}]', 'metrics from [{"idgen.dev/scraper":"true"}]'];
  if (JSON.stringify(allowed) !== JSON.stringify(expected)) out.push(`NetworkPolicy lets in ${allowed.join('; ')}`);
  for (const p of policy.ingress.flatMap((rule) => rule.ports))
    if (ports[p.port] === undefined) out.push(`NetworkPolicy port ${p.port}`);
  return out;
}

describe('deploy/kubernetes: kustomize base and one overlay per region', () => {
  const pki = makeTestPki({ clients: ['idgen-node'], name: 'deploy' });
  const rendered = new Map(REGIONS.map((r) => [r, render(join(KUBERNETES, 'overlays', `region-${r}`))]));
  const region = (r: number): K8sObject[] => rendered.get(r) ?? [];

  it.each(REGIONS)('region %i: every object validates against the Kubernetes schemas', (r) => {
    expect(
      region(r)
        .map((o) => o.kind)
        .sort(),
    ).toEqual([
      'ConfigMap',
      'Deployment',
      'Namespace',
      'NetworkPolicy',
      'PodDisruptionBudget',
      'Service',
      'ServiceAccount',
    ]);
    expect(schemaProblems(region(r))).toEqual([]);
  });

  it.each(REGIONS)('region %i: every flag, variable, port and probe fits the server parser', (r) => {
    expect(configProblems(region(r), r, pki)).toEqual([]);
  });

  it.each(REGIONS)('region %i: its own namespace, names, labels and etcd Secret; selectors match the pods', (r) => {
    const objects = region(r);
    for (const o of objects) {
      expect(o.metadata.labels?.['idgen.dev/region']).toBe(String(r));
      if (o.kind === 'Namespace') expect(o.metadata.name).toBe(`idgen-r${r}`);
      else {
        expect(o.metadata.namespace).toBe(`idgen-r${r}`);
        expect(o.metadata.name).toMatch(new RegExp(`^idgen-[a-z]+-r${r}(-[a-z0-9]+)?$`));
      }
    }
    const pod = podSpecOf(objects);
    const template = (
      only(objects, 'Deployment')['spec'] as { template: { metadata: { labels: Record<string, string> } } }
    ).template;
    expect(template.metadata.labels['idgen.dev/region']).toBe(String(r));
    const selects = (selector: Record<string, string> | undefined): boolean =>
      selector !== undefined && Object.entries(selector).every(([k, v]) => template.metadata.labels[k] === v);
    const spec = (kind: string) =>
      only(objects, kind)['spec'] as Record<string, { matchLabels?: Record<string, string> } & Record<string, string>>;
    expect(selects(spec('Deployment')['selector']?.matchLabels)).toBe(true);
    expect(selects(spec('PodDisruptionBudget')['selector']?.matchLabels)).toBe(true);
    expect(selects(spec('NetworkPolicy')['podSelector']?.matchLabels)).toBe(true);
    expect(selects(spec('Service')['selector'] as unknown as Record<string, string>)).toBe(true);
    // Spread across zones, then nodes, counting this region's pods.
    expect(
      pod.topologySpreadConstraints?.map((t) => [t.topologyKey, t.maxSkew, selects(t.labelSelector?.matchLabels)]),
    ).toEqual([
      ['topology.kubernetes.io/zone', 1, true],
      ['kubernetes.io/hostname', 1, true],
    ]);
    expect(pod.volumes?.find((v) => v.name === 'etcd-credentials')?.secret?.secretName).toBe(`idgen-etcd-r${r}`);
    expect(pod.volumes?.find((v) => v.name === 'serving-tls')?.secret?.secretName).toBe('idgen-serving-tls');
    expect(
      (only(objects, 'Deployment')['spec'] as { template: { spec: { serviceAccountName: string } } }).template.spec
        .serviceAccountName,
    ).toBe(`idgen-server-r${r}`);
    expect((only(objects, 'Service')['spec'] as { clusterIP: string }).clusterIP).toBe('None');
  });

  it.each(REGIONS)('region %i: Pod Security "restricted", enforced on its namespace, and no password in args', (r) => {
    const objects = region(r);
    expect(restrictedViolations(podSpecOf(objects))).toEqual([]);
    expect(only(objects, 'Namespace').metadata.labels?.['pod-security.kubernetes.io/enforce']).toBe('restricted');
    const args = podSpecOf(objects).containers[0]?.args ?? [];
    expect(args.filter((a) => /^--[a-z-]*password(=|$)/.test(a))).toEqual([]);
  });

  /** Region `r`'s overlay with a component added, as an operator writes it in the overlay's `components:`. */
  function withComponent(r: number, ...components: string[]): K8sObject[] {
    const dir = tempDirSync('kustomize').path;
    const rel = (p: string): string => relative(dir, p);
    const listed = components.map((c) => rel(join(KUBERNETES, 'components', c))).join(', ');
    writeFileSync(
      join(dir, 'kustomization.yaml'),
      `resources: [${rel(join(KUBERNETES, 'overlays', `region-${r}`))}]\ncomponents: [${listed}]\n`,
    );
    return render(dir);
  }

  it('components/mesh-tls and components/host-chrony compose in either order, to the same objects', () => {
    const one = withComponent(2, 'mesh-tls', 'host-chrony');
    const other = withComponent(2, 'host-chrony', 'mesh-tls');
    expect(other).toEqual(one);
    expect(configProblems(one, 2, pki, 'mesh')).toEqual([]);
    const args = podSpecOf(one).containers[0]?.args ?? [];
    expect(args).toContain('--time-source=chrony');
    expect(args).toContain('--status-details=full');
    expect(args.filter((a) => a.startsWith('--tls-'))).toEqual([]);
  });

  it('components/host-chrony: --time-source chrony through the host socket, the trade-off a "privileged" namespace', () => {
    const objects = withComponent(2, 'host-chrony');
    expect(schemaProblems(objects)).toEqual([]);
    expect(configProblems(objects, 2, pki)).toEqual([]);
    const { argv, env } = kubeletView(objects, pki);
    const outcome = parseConfig(argv, env);
    expect(outcome.kind === 'config' && outcome.config.timeSource.mode).toBe('chrony');
    expect(restrictedViolations(podSpecOf(objects))).toEqual(['volume chrony: hostPath']);
    expect(only(objects, 'Namespace').metadata.labels?.['pod-security.kubernetes.io/enforce']).toBe('privileged');
    // The base itself keeps the node off chrony (restricted): that trade-off is stated at the flag.
    expect(configProblems(region(2), 2, pki)).toEqual([]);
    expect(podSpecOf(region(2)).containers[0]?.args).toContain('--time-source=none');
  });

  it('components/mesh-tls: plaintext serving behind a sidecar, readiness the native grpc: probe, which the node answers SERVING there', async () => {
    const objects = withComponent(1, 'mesh-tls');
    expect(schemaProblems(objects)).toEqual([]);
    expect(configProblems(objects, 1, pki, 'mesh')).toEqual([]);
    expect(restrictedViolations(podSpecOf(objects))).toEqual([]);
    expect(podSpecOf(objects).volumes?.map((v) => v.name)).toEqual(['etcd-credentials', 'tmp']);
    // What the kubelet's grpc: probe sends, in plaintext h2c, to a node serving as this component configures it.
    const node = await startServer(['--time-source', 'none', '--status-details', 'full']);
    await node.ready();
    const health = createClient(Health, createGrpcTransport({ baseUrl: node.baseUrl }));
    expect((await health.check({ service: '' }, { timeoutMs: 5000 })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    expect((await node.stop()).code).toBe(0);
  });

  it('the checks fail on a planted mistake: a field of the wrong type, an unknown flag, a probe on the wrong port', () => {
    const planted = (change: (deployment: { spec: { replicas: unknown; template: { spec: PodSpec } } }) => void) => {
      const copy = JSON.parse(JSON.stringify(region(2))) as K8sObject[];
      change(only(copy, 'Deployment') as unknown as { spec: { replicas: unknown; template: { spec: PodSpec } } });
      return copy;
    };
    const wrongType = planted((d) => (d.spec.replicas = '3'));
    expect(schemaProblems(wrongType)).toEqual([
      { kind: 'Deployment', name: 'idgen-server-r2', problem: 'data/spec/replicas must be integer' },
    ]);
    const unknownFlag = planted((d) => d.spec.template.spec.containers[0]?.args?.push('--tls-client-name=x'));
    expect(configProblems(unknownFlag, 2, pki)).toEqual(expect.arrayContaining(['unknown flag --tls-client-name']));
    const wrongProbe = planted((d) => {
      const c = d.spec.template.spec.containers[0] as Container;
      c.readinessProbe = { httpGet: { path: '/readyz', port: 'serving' } };
    });
    expect(configProblems(wrongProbe, 2, pki)).toEqual(['readiness /readyz on serving']);
    expect(configProblems(region(2), 3, pki)).toEqual(['region 2, not 3']);
  });

  it('the node answers /readyz and /healthz on the metrics port with mTLS serving on; a plaintext grpc.health.v1 Check (what the kubelet grpc: probe sends) cannot pass there', async () => {
    const node = await startServer([
      '--time-source',
      'none',
      '--tls-cert',
      pki.server.certFile,
      '--tls-key',
      pki.server.keyFile,
      '--tls-client-ca',
      pki.caFile,
      '--tls-client-names',
      'idgen-node',
    ]);
    await node.ready();
    const metricsBase = (node.metricsUrl ?? '').replace(/\/metrics$/, '');
    for (const path of ['/readyz', '/healthz']) expect((await fetch(`${metricsBase}${path}`)).status).toBe(200);
    // The kubelet dials its grpc: probe in plaintext (no TLS option in the API): the TLS port refuses it.
    const plaintext = await rawGrpc(node.baseUrl, '/grpc.health.v1.Health/Check', new Uint8Array()).then(
      (r) => (r.status === 200 && r.grpcStatus === '0' ? 'passed' : `no answer (HTTP ${r.status})`),
      (e: Error) => `failed: ${e.message}`,
    );
    expect(plaintext).not.toBe('passed');
    expect(plaintext).toMatch(/^(no answer \(HTTP 0\)|failed: )/);
    // Over TLS with a caller's certificate, the same Check says SERVING, as /readyz said 200.
    const client = pki.clients['idgen-node'];
    const health = createClient(
      Health,
      createGrpcTransport({
        baseUrl: `https://127.0.0.1:${node.port}`,
        nodeOptions: { ca: pki.ca, cert: client?.cert, key: client?.key, servername: 'localhost' },
      }),
    );
    expect((await health.check({ service: '' }, { timeoutMs: 5000 })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    expect((await node.stop()).code).toBe(0);
  });
});

describe('deploy/Dockerfile', () => {
  const text = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8');
  const lines = text.split('\n').filter((l) => !l.startsWith('#'));

  it('builds on the base image given as a build argument (Node 24 slim by default), runs as a non-root user, node itself as PID 1', () => {
    expect(lines.find((l) => l.startsWith('ARG BASE_IMAGE='))).toMatch(/^ARG BASE_IMAGE=node:24-[a-z]+-slim$/);
    const froms = lines.filter((l) => l.startsWith('FROM '));
    expect(froms.length).toBeGreaterThanOrEqual(2); // multi-stage
    for (const f of froms) expect(f).toMatch(/^FROM \$\{BASE_IMAGE\}( AS \w+)?$/);
    expect(lines.find((l) => l.startsWith('USER '))).toMatch(/^USER [1-9]\d*:[1-9]\d*$/);
    const entry = lines.find((l) => l.startsWith('ENTRYPOINT '));
    const argv = JSON.parse(entry?.slice('ENTRYPOINT '.length) ?? '[]') as string[];
    expect(argv[0]).toBe('node'); // exec form, no shell between SIGTERM and node
    expect(argv.slice(1, -1)).toEqual(launchFlags);
    expect(argv.at(-1)).toBe('/opt/idgen/apps/server/dist/main.js');
    expect(existsSync(MAIN_JS)).toBe(true);
  });

  it('checks health with /readyz on the metrics side port (wait-ready.mjs, copied in), which TLS serving leaves plain', () => {
    const health = text.match(/^HEALTHCHECK [^\n]*\\\n\s*CMD (\[.*\])$/m)?.[1];
    expect(JSON.parse(health ?? '[]')).toEqual(['node', '/opt/idgen/deploy/wait-ready.mjs', '2']);
    // The production tree (tools/scripts/prod-tree.sh, which copies deploy/wait-ready.mjs into it) is what the image holds.
    expect(lines).toContain('COPY --from=build --chown=root:root /opt/idgen /opt/idgen');
    expect(readFileSync(join(REPO, 'tools', 'scripts', 'prod-tree.sh'), 'utf8')).toContain(
      'cp deploy/wait-ready.mjs "$dest/deploy/"',
    );
    expect(readFileSync(join(DEPLOY, 'wait-ready.mjs'), 'utf8')).toMatch(/IDGEN_METRICS_LISTEN[\s\S]*\/readyz/);
  });

  it('sets only variables the server has, and exposes the ports they name', () => {
    const env = [...text.matchAll(/\b(IDGEN_[A-Z_]+)=([^\s\\]+)/g)]
      .filter((m) => !/IDGEN_TIME_SOURCE=none/.test(m[0])) // named in a comment, for a host without chrony
      .filter((m) => m[1] !== 'IDGEN_COMMIT') // a build argument GetStatus reports (build-info.ts), not a flag
      .map((m) => [m[1] ?? '', m[2] ?? ''] as const);
    expect(lines).toContain('ARG IDGEN_COMMIT=');
    expect(env.length).toBeGreaterThan(0);
    for (const [name] of env) expect(envNames).toContain(name);
    const outcome = parseConfig(['--standalone'], Object.fromEntries(env));
    if (outcome.kind !== 'config') throw new Error(outcome.stderr);
    const exposed = (lines.find((l) => l.startsWith('EXPOSE ')) ?? '').split(/\s+/).slice(1).map(Number);
    expect(exposed).toEqual([outcome.config.node.listen.port, outcome.config.metricsListen?.port]);
  });

  it('.dockerignore keeps installed, built and cached trees and the git history out of the build context', () => {
    const ignored = readFileSync(join(REPO, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['**/node_modules', '**/dist', '.git', '.nx', '.cache', '.chaos', '.jest-results'])
      expect(ignored).toContain(entry);
  });
});

describe('deploy/systemd', () => {
  const SYSTEMD = join(DEPLOY, 'systemd');
  const unit = join(SYSTEMD, 'idgen-server.service');
  const text = readFileSync(unit, 'utf8');
  const NODE = '/opt/idgen/node/bin/node';
  const WAIT_READY = join(DEPLOY, 'wait-ready.mjs');

  /** The unit's `Key=value` lines (the last one wins, as in systemd, except the repeatable ones). */
  const settings = (key: string): string[] =>
    [...text.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1] ?? '');

  /**
   * `systemd-analyze verify` in a root that holds what the runbook installs (docs/runbook.md "Installing on a
   * host"): the unit in /etc/systemd/system, the executables it names, and the system's own units.
   */
  function verifyInRoot(unitText: string, executables: readonly string[]): { status: number | null; output: string } {
    if (findOnPath('systemd-analyze') === undefined)
      throw new Error('systemd-analyze not found: install systemd (apt-get install systemd)');
    const root = tempDirSync('systemd-root').path;
    mkdirSync(join(root, 'etc', 'systemd', 'system'), { recursive: true });
    mkdirSync(join(root, 'usr', 'lib', 'systemd'), { recursive: true });
    cpSync('/usr/lib/systemd/system', join(root, 'usr', 'lib', 'systemd', 'system'), {
      recursive: true,
      verbatimSymlinks: true,
    });
    writeFileSync(join(root, 'etc', 'systemd', 'system', 'idgen-server.service'), unitText);
    for (const exe of executables) {
      mkdirSync(join(root, dirname(exe)), { recursive: true });
      writeFileSync(join(root, exe), '#!/bin/sh\n', { mode: 0o755 });
    }
    const r = spawnSync('systemd-analyze', ['verify', `--root=${root}`, 'idgen-server.service'], { encoding: 'utf8' });
    return { status: r.status, output: `${r.stdout}${r.stderr}` };
  }

  it('passes systemd-analyze verify in a root holding the installed paths (and fails when Node 24 is not there)', () => {
    expect(verifyInRoot(text, [NODE])).toEqual({ status: 0, output: '' });
    const missing = verifyInRoot(text, []);
    expect(missing.status).not.toBe(0);
    expect(missing.output).toContain(`Command ${NODE} is not executable`);
  });

  it('runs Node 24 at its explicit path, with the launch flags, and only flags and variables the server parses', () => {
    const [exec] = settings('ExecStart');
    const argv = (exec ?? '').split(/\s+/);
    expect(argv.slice(0, 2 + launchFlags.length)).toEqual([
      NODE,
      ...launchFlags,
      '/opt/idgen/apps/server/dist/main.js',
    ]);
    const args = argv.slice(2 + launchFlags.length);
    for (const [flag] of flagsOf(args)) expect(flagNames).toContain(flag);
    // The unit's Environment= lines, then /etc/idgen/idgen.env as the runbook's example gives it; file paths
    // replaced by real files of the same kind, the credential by a real password file.
    const pki = makeTestPki({ clients: ['idgen-node'], name: 'systemd' });
    const client = pki.clients['idgen-node'];
    const credentials = tempDirSync('credentials').path;
    writeFileSync(join(credentials, 'etcd-password'), 'secret\n');
    const files: Record<string, string | undefined> = {
      IDGEN_ETCD_CA: pki.caFile,
      IDGEN_ETCD_CERT: client?.certFile,
      IDGEN_ETCD_KEY: client?.keyFile,
      IDGEN_TLS_CERT: pki.server.certFile,
      IDGEN_TLS_KEY: pki.server.keyFile,
      IDGEN_TLS_CLIENT_CA: pki.caFile,
    };
    const env: Record<string, string> = {};
    const example = readFileSync(join(SYSTEMD, 'idgen.env.example'), 'utf8');
    for (const line of [...settings('Environment'), ...example.split('\n').filter((l) => /^[A-Z]/.test(l))]) {
      const eq = line.indexOf('=');
      const name = line.slice(0, eq);
      if (!name.startsWith('IDGEN_')) continue;
      expect(envNames).toContain(name);
      env[name] = files[name] ?? line.slice(eq + 1);
    }
    const outcome = parseConfig(
      args.map((a) => a.replace('${CREDENTIALS_DIRECTORY}', credentials)),
      env,
    );
    if (outcome.kind !== 'config') throw new Error(`the unit's configuration is refused: ${outcome.stderr}`);
    expect(outcome.config.region).toBe(2);
    expect(outcome.config.lease.etcd?.auth?.username).toBe('idgen-node');
    expect(outcome.config.node.tls?.clientNames).toEqual(['orders-service', 'billing-service']);
    // The readiness wait polls the metrics address the unit sets.
    expect(outcome.config.metricsListen).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(settings('ExecStartPost')).toEqual([`${NODE} /opt/idgen/deploy/wait-ready.mjs 110`]);
    expect(Number(settings('TimeoutStartSec')[0])).toBeGreaterThan(110);
  });

  it('restarts on failure but not after a configuration error (exit 2, the server parser`s code), stops after the shutdown timeout', async () => {
    expect(settings('Restart')).toEqual(['on-failure']);
    expect(settings('RestartPreventExitStatus')).toEqual([String(CONFIG_ERROR_EXIT_CODE)]);
    expect(settings('NoNewPrivileges')).toEqual(['yes']);
    expect(Number(settings('TimeoutStopSec')[0]) * 1000).toBeGreaterThan(defaultShutdownMs);
    // A configuration error really exits with that code.
    const bad = spawnServer(['--standalone', '--lease-ttl', 'soon']);
    expect((await bad.exited).code).toBe(CONFIG_ERROR_EXIT_CODE);
  });

  it('wait-ready.mjs (ExecStartPost) returns 0 once /readyz says 200, and 1 at its deadline on a node that is not ready', async () => {
    const ready = await startServer(['--time-source', 'none']);
    const metrics = (ready.metricsUrl ?? '').replace(/^http:\/\//, '').replace(/\/metrics$/, '');
    const wait = (listen: string, seconds: number) =>
      spawnProcess(process.execPath, [WAIT_READY, String(seconds)], {
        env: { ...process.env, IDGEN_METRICS_LISTEN: listen },
      });
    expect((await wait(metrics, 30).exited).code).toBe(0);
    expect((await ready.stop()).code).toBe(0);
    // chronyc missing from PATH: the node stays "starting" (time-source-unavailable), never ready.
    const notReady = await startServer(['--time-source', 'chrony'], { PATH: dirname(process.execPath) });
    const url = (notReady.metricsUrl ?? '').replace(/\/metrics$/, '');
    await waitFor('/readyz 503', async () => (await fetch(`${url}/readyz`)).status === 503, 10_000);
    const waiting = wait(url.replace(/^http:\/\//, ''), 2);
    const exit = await waiting.exited;
    expect(exit.code).toBe(1);
    expect(waiting.stderrLines.join('\n')).toMatch(/not ready before the deadline: 503 time-source-unavailable/);
    expect((await notReady.stop()).code).toBe(0);
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
