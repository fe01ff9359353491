// Readiness that says why, on real processes: /readyz's body, Health/Check's headers,
// GetStatus fields 19-23 and the `readiness:` log line agree on the reason a node is not ready.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health, HealthCheckResponse_ServingStatus, ReadinessReason } from '@idgen/proto';
import { bindRegion, cleanupAll, freePort, startEtcd, tempDirSync, type EtcdServer } from '@idgen/testing';
import { idClient, standaloneStateFile, startServer, waitFor, type ServerNode } from './support.test-helper.js';

jest.setTimeout(90_000);

let etcd: EtcdServer | undefined;
const nodes: ServerNode[] = [];
afterAll(async () => {
  await Promise.all(nodes.map((n) => n.stop()));
  await etcd?.stop();
  await cleanupAll();
});

async function start(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<ServerNode> {
  const node = await startServer(args, env);
  nodes.push(node);
  return node;
}

interface ReadyzBody {
  ready: boolean;
  reason: string;
  cause?: string;
  detail: string;
  waitMs?: number;
  state: string;
}

async function readyz(node: ServerNode): Promise<{ status: number; body: ReadyzBody }> {
  const res = await fetch(`${node.baseUrl}/readyz`, { signal: AbortSignal.timeout(5_000) });
  return { status: res.status, body: (await res.json()) as ReadyzBody };
}

/** Polls /readyz (bounded) until its reason is `reason`; returns that answer. */
async function readyzSays(
  node: ServerNode,
  reason: string,
  timeoutMs = 20_000,
): Promise<{ status: number; body: ReadyzBody }> {
  let last: { status: number; body: ReadyzBody } | undefined;
  try {
    await waitFor(
      `/readyz to say ${reason}`,
      async () => {
        last = await readyz(node);
        return last.body.reason === reason;
      },
      timeoutMs,
    );
  } catch (e) {
    throw new Error(`${(e as Error).message}; last answer ${JSON.stringify(last)}`);
  }
  if (last === undefined) throw new Error('no /readyz answer');
  return last;
}

/** Health/Check over gRPC: the status and the readiness headers. */
async function healthCheck(node: ServerNode): Promise<{ status: HealthCheckResponse_ServingStatus; headers: Headers }> {
  const client = createClient(Health, createGrpcTransport({ baseUrl: node.baseUrl }));
  let headers = new Headers();
  const res = await client.check({ service: '' }, { onHeader: (h) => (headers = h), timeoutMs: 5_000 });
  return { status: res.status, headers };
}

describe('a node says why it is not ready', () => {
  it('--time-source chrony with no chronyc on PATH: time-source-unavailable (chronyc-missing)', async () => {
    const emptyPath = tempDirSync('idgen-no-chronyc').path;
    const node = await start(['--time-source', 'chrony', '--metrics-listen', 'off'], { PATH: emptyPath });
    const { status, body } = await readyzSays(node, 'time-source-unavailable');
    expect(status).toBe(503);
    expect(body).toMatchObject({ ready: false, cause: 'chronyc-missing', state: 'starting' });
    expect(body.detail).toMatch(/chronyc not found: install chrony/);

    const health = await healthCheck(node);
    expect(health.status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    expect(health.headers.get('idgen-readiness-reason')).toBe('time-source-unavailable');
    expect(health.headers.get('idgen-readiness-cause')).toBe('chronyc-missing');

    const status2 = await idClient(node.baseUrl, 'grpc-h2').getStatus({});
    expect(status2).toMatchObject({
      ready: false,
      readinessReason: ReadinessReason.TIME_SOURCE_UNAVAILABLE,
      readinessCause: 'chronyc-missing',
    });

    await node.process.waitForLine(/"msg":"readiness: not ready, time-source-unavailable \(chronyc-missing\)/, 10_000);
    await node.process.waitForLine(
      /"problem":"chronyc-missing".*"msg":"boot: time source unhealthy \(chronyc-missing\)/,
      10_000,
    );
  });

  it('an etcd URL nobody listens on: etcd-unreachable, with etcd’s error', async () => {
    const port = await freePort();
    const node = await start([
      '--region',
      '3',
      '--etcd',
      `http://127.0.0.1:${port}`,
      '--time-source',
      'none',
      '--metrics-listen',
      'off',
    ]);
    const { status, body } = await readyzSays(node, 'etcd-unreachable');
    expect(status).toBe(503);
    expect(body.ready).toBe(false);
    expect(body.detail).toMatch(/failed \(.+\); retrying in \d+ ms$/);

    const health = await healthCheck(node);
    expect(health.status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    expect(health.headers.get('idgen-readiness-reason')).toBe('etcd-unreachable');
    expect((await idClient(node.baseUrl, 'grpc-h2').getStatus({})).readinessReason).toBe(
      ReadinessReason.ETCD_UNREACHABLE,
    );
    await node.process.waitForLine(/"msg":"readiness: not ready, etcd-unreachable/, 10_000);
  });

  it('a spare while the only slot is held: waiting-for-slot, naming the holder; ready once it frees up', async () => {
    etcd ??= await startEtcd();
    await bindRegion(etcd, 4); // idgen region init, before the region's first node
    const args = [
      '--region',
      '4',
      '--etcd',
      etcd.clientUrl,
      '--workers',
      '5-5',
      '--time-source',
      'none',
      '--lease-ttl',
      '4',
      '--metrics-listen',
      'off',
    ];
    const holder = await start([...args, '--node-id', 'holder']);
    await holder.ready();
    expect((await readyz(holder)).body).toMatchObject({ ready: true, reason: 'ready', state: 'serving' });

    const spare = await start([...args, '--node-id', 'spare']);
    const { status, body } = await readyzSays(spare, 'waiting-for-slot');
    expect(status).toBe(503);
    expect(body.detail).toMatch(
      /no free worker slot: all 1 slot this node may claim are held \(1 held: 4\/5: .*holder/,
    );
    expect((await healthCheck(spare)).headers.get('idgen-readiness-reason')).toBe('waiting-for-slot');
    await spare.process.waitForLine(/"msg":"readiness: not ready, waiting-for-slot/, 10_000);

    expect((await holder.stop()).code).toBe(0); // a clean release: no floor to wait out
    await spare.ready(30_000);
    expect((await readyzSays(spare, 'ready')).status).toBe(200);
    await spare.process.waitForLine(/"readiness":"ready".*"msg":"readiness: ready"/, 10_000);
  });

  it('a serving node whose etcd is killed: fenced (lease), then etcd-unreachable while it claims again', async () => {
    const own = await startEtcd();
    await bindRegion(own, 4);
    const node = await start([
      '--region',
      '4',
      '--etcd',
      own.clientUrl,
      '--time-source',
      'none',
      '--lease-ttl',
      '4',
      '--metrics-listen',
      'off',
    ]);
    await node.ready();
    expect((await readyz(node)).body.reason).toBe('ready');
    await own.kill();
    const { status, body } = await readyzSays(node, 'etcd-unreachable', 40_000);
    expect(status).toBe(503);
    expect(body.state).toBe('fenced');
    // On the way it was fenced for its lease (the deadline passed without an acknowledged keep-alive).
    await node.process.waitForLine(
      /"readiness":"fenced","cause":"lease".*"msg":"readiness: not ready, fenced \(lease\)/,
      5_000,
    );
    await node.process.waitForLine(/"readiness":"etcd-unreachable".*"previous":"fenced"/, 5_000);
    await own.stop();
  });

  it('a restart whose clock reads 4 s earlier (libfaketime): waiting-for-floor, with how long', async () => {
    const stateFile = standaloneStateFile();
    const clockFile = join(dirname(stateFile), 'faketime');
    writeFileSync(clockFile, '+0\n');
    const env = {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: clockFile,
      FAKETIME_NO_CACHE: '1',
      DONT_FAKE_MONOTONIC: '1',
    };
    const args = ['--time-source', 'none', '--metrics-listen', 'off', '--state-file', stateFile];
    const first = await start(args, env);
    await first.ready();
    await idClient(first.baseUrl, 'grpc-h2').nextIds({ count: 10 });
    expect((await first.stop()).code).toBe(0);
    writeFileSync(clockFile, '-4s\n');
    const second = await start(args, env);
    const { status, body } = await readyzSays(second, 'waiting-for-floor');
    expect(status).toBe(503);
    expect(body.waitMs).toBeGreaterThan(0);
    expect(body.waitMs).toBeLessThanOrEqual(5_000);
    await second.process.waitForLine(/"msg":"readiness: not ready, waiting-for-floor, \d+ ms left/, 10_000);
    expect((await readyzSays(second, 'ready')).status).toBe(200);
  });
});

/** Where Debian's libfaketime puts the preload library; missing: fail and say what to install. */
function libfaketime(): string {
  const listed = spawnSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8' });
  const path = (listed.stdout ?? '').split('\n').find((l) => l.endsWith('/libfaketime.so.1'));
  if (path === undefined)
    throw new Error("libfaketime.so.1 not found: install Debian's faketime package (apt-get install faketime)");
  return path;
}
