import { cleanupAll, startEtcdCluster } from '@idgen/testing';
import type { EtcdCluster } from '@idgen/testing';
import { createEtcdLease } from './etcd-lease.js';
import { RecordingTarget, uniquePrefix } from './recording-target.test-helper.js';
import type { WorkerLease } from './types.js';

jest.setTimeout(120_000);

let cluster: EtcdCluster;
const leases: WorkerLease[] = [];

beforeAll(async () => {
  cluster = await startEtcdCluster(3);
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  await cleanupAll();
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('3-member etcd cluster', () => {
  it('killing the leader (SIGKILL): keep-alives go on with the new leader and the holder does not fence', async () => {
    const target = new RecordingTarget('holder');
    const lease = createEtcdLease(
      {
        endpoints: [...cluster.endpoints],
        prefix: uniquePrefix('cluster'),
        region: 0,
        workers: '0-3',
        ttlSeconds: 6,
        keepAliveIntervalMs: 500,
        keepAliveTimeoutMs: 400,
        fenceMarginMs: 1000,
        requestTimeoutMs: 1000,
      },
      target,
    );
    leases.push(lease);
    await lease.start();
    await target.waitFor((e) => e.kind === 'extend', 5000, 'first keep-alive');

    const leader = await cluster.leader();
    const stoppedAt = performance.now();
    await leader.kill();
    const newLeader = await cluster.leader(15_000);
    expect(newLeader.name).not.toBe(leader.name);
    const electedAt = performance.now();

    // several keep-alive intervals after the election
    await sleep(3000);
    const after = target.of('extend').filter((e) => e.mono > electedAt);
    expect(after.length).toBeGreaterThan(0);
    expect(target.of('unassign')).toEqual([]);
    expect(target.canMint()).toBe(true);
    expect(lease.snapshot().state).toBe('alive');
    // the longest stretch without an acknowledged keep-alive stayed below the deadline (TTL − margin)
    const extends_ = target.of('extend').map((e) => e.mono);
    const gaps = extends_.slice(1).map((m, i) => m - (extends_[i] ?? m));
    const longest = Math.max(...gaps);
    expect(longest).toBeLessThan(5000);
    console.log(
      `leader ${leader.name} killed; new leader ${newLeader.name} known after ${(electedAt - stoppedAt).toFixed(0)} ms; ` +
        `longest gap between acknowledged keep-alives ${longest.toFixed(0)} ms (deadline allows 5000 ms); no fence`,
    );
    await leader.start();
  });
});
