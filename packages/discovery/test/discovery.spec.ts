import { bindRegion, cleanupAll, startEtcd } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { LeaseConfigError, createEtcdLease } from '@idgen/lease';
import { leaseKeys } from '@idgen/lease/records';
import type { LeaseExtension, LeaseTarget, WorkerAssignment, WorkerLease } from '@idgen/lease';
import type { ServingNode } from '@idgen/lease/records';
import { createDiscoveryReader } from '../src/discovery.js';

/** A lease target that only holds what the lease gives it: discovery needs a registered node, not a minter. */
class HoldingTarget implements LeaseTarget {
  assignment: WorkerAssignment | undefined;
  assign(a: WorkerAssignment): void {
    this.assignment = a;
  }
  extend(_e: LeaseExtension): void {
    // The lease keeps itself alive; a holding target has no deadline to move.
  }
  unassign(): void {
    this.assignment = undefined;
  }
  lastMintedMs(): number {
    return -1;
  }
}

const uniquePrefix = (name: string): string => `/idgen-test/${name}-${process.pid}-${Date.now()}`;

jest.setTimeout(120_000);

let etcd: EtcdServer;
const leases: WorkerLease[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  await cleanupAll();
});

async function until(pred: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const start = Date.now();
  while (!pred()) {
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('createDiscoveryReader', () => {
  it('validates before any I/O', () => {
    expect(() => createDiscoveryReader({ endpoints: ['nope'], region: 1 })).toThrow(LeaseConfigError);
  });

  it('lists and watches serving nodes, skips garbage, and survives an etcd restart', async () => {
    const prefix = uniquePrefix('discovery');
    await bindRegion(etcd, 4, prefix);
    const start = async (nodeId: string, address: string): Promise<WorkerLease> => {
      const l = createEtcdLease(
        {
          endpoints: [etcd.clientUrl],
          prefix,
          region: 4,
          workers: '0-9',
          nodeId,
          address,
          ttlSeconds: 6,
          keepAliveIntervalMs: 500,
          keepAliveTimeoutMs: 400,
          requestTimeoutMs: 1000,
          backoff: { initialMs: 50, maxMs: 300 },
        },
        new HoldingTarget(),
      );
      leases.push(l);
      await l.start();
      await l.register();
      return l;
    };
    const kv = new Etcd3({ hosts: [etcd.clientUrl] });
    await kv.put(leaseKeys.node(prefix, 4, 'broken')).value('{{{');
    kv.close();

    const reader = createDiscoveryReader({ endpoints: [etcd.clientUrl], prefix, region: 4 });
    let latest: ServingNode[] = [];
    const stop = reader.watch((nodes) => {
      latest = nodes;
    });
    const a = await start('node-a', '127.0.0.1:9001');
    await until(() => latest.map((n) => n.nodeId).join() === 'node-a', 10_000, 'node-a listed');
    expect(latest[0]).toMatchObject({ region: 4, address: '127.0.0.1:9001' });

    await etcd.restart({ hard: true, downMs: 200 });
    await start('node-b', '127.0.0.1:9002');
    await until(() => latest.map((n) => n.nodeId).join() === 'node-a,node-b', 20_000, 'both listed after the restart');

    await a.release();
    await until(() => latest.map((n) => n.nodeId).join() === 'node-b', 10_000, 'node-a gone after release');
    expect((await reader.list()).map((n) => n.nodeId)).toEqual(['node-b']);
    stop();
    await reader.close();
    await expect(reader.list()).rejects.toThrow(/closed/);
  });
});
