// One live cluster per code (docs/design.md §5, "One live cluster per code"; §8, issue 31 case 4), against real etcd
// servers and a real `etcdctl snapshot save`/`restore`: region 2's etcd keeps running (it was only cut off from the
// operator), its snapshot is restored onto a second cluster at another URL, and `idgen region restored` runs there.
// Without the rule the second cluster is bound at once and its node mints region 2 / worker 0 beside the old cluster's
// holder. With it the step is refused until the old cluster is retired (its holders fence at once) or stated stopped.
import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll, startEtcd, tempDir, type EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { join } from 'node:path';
import { createEtcdLease } from '../src/etcd-lease.js';
import { RecordingTarget, SlotBook, uniquePrefix } from '../src/recording-target.test-helper.js';
import { RegionBindingError, parseRegionBinding, regionBindingKey } from '../src/region-binding.js';
import { initRegion } from '../src/region-init.js';
import { markRegionRestored } from '../src/region-restore.js';
import type { EtcdLeaseOptions } from '../src/config.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(120_000);

const REGION = 2;
const leases: WorkerLease[] = [];
const clients: Etcd3[] = [];

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  for (const c of clients) c.close();
  await cleanupAll();
});

function io(e: EtcdServer, prefix: string) {
  const client = new Etcd3({ hosts: [e.clientUrl] });
  clients.push(client);
  return { client, prefix, timeoutMs: 5000, layout: DEFAULT_LAYOUT };
}

function options(e: EtcdServer, prefix: string, nodeId: string): EtcdLeaseOptions {
  return {
    endpoints: [e.clientUrl],
    prefix,
    region: REGION,
    workers: '0-0',
    nodeId,
    ttlSeconds: 2,
    keepAliveIntervalMs: 400,
    keepAliveTimeoutMs: 300,
    fenceMarginMs: 500,
    requestTimeoutMs: 1500,
    backoff: { initialMs: 50, maxMs: 400 },
  };
}

function holder(e: EtcdServer, prefix: string, name: string, book: SlotBook) {
  const t = new RecordingTarget(name, book);
  const lease = createEtcdLease(options(e, prefix, name), t);
  leases.push(lease);
  return { lease, t };
}

function highestCeiling(t: RecordingTarget): number {
  return Math.max(...t.events.flatMap((e) => [e.ceiling ?? -1, e.assignment?.ceilingMs ?? -1]));
}

async function refusal(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a refusal, got success');
}

/** Region 2's etcd with a holder minting, and a second cluster restored from its snapshot at another URL. */
async function twoClusters(name: string) {
  const first = await startEtcd();
  const prefix = uniquePrefix(name);
  await initRegion(io(first, prefix), REGION, { ttlCeilingSeconds: 2 });
  const dir = await tempDir('idgen-snapshot');
  const snapshot = join(dir.path, 'snap.db');
  await first.snapshot(snapshot);
  const book = new SlotBook();
  const old = holder(first, prefix, `${name}-old`, book);
  await old.lease.start();
  await old.t.waitFor((e) => e.kind === 'extend', 10_000, "a keep-alive of the old cluster's holder");
  const second = await startEtcd();
  await second.restore(snapshot, { clusterToken: `${name}-${Date.now()}` });
  return { first, second, prefix, book, old };
}

describe('one live cluster per code', () => {
  it('region restored onto a second cluster is refused while nothing proves the first gone; the binding there is untouched', async () => {
    const { second, prefix, old } = await twoClusters('retire-refused');
    const secondIo = io(second, prefix);
    const before = await secondIo.client.get(regionBindingKey(prefix)).string();
    const e = await refusal(markRegionRestored(secondIo, REGION, { ttlMs: 2000 }));
    expect(e).toBeInstanceOf(RegionBindingError);
    expect(e.message).toMatch(
      /^region 2 was bound in cluster \d+, and this etcd is cluster \d+: prove the old cluster gone first: --retire-etcd/,
    );
    expect(await secondIo.client.get(regionBindingKey(prefix)).string()).toBe(before);
    // A node of the second cluster keeps refusing it (another cluster ID): nothing mints there.
    const t = new RecordingTarget('retire-refused-new');
    const lease = createEtcdLease(options(second, prefix, 'retire-refused-new'), t);
    leases.push(lease);
    void lease.start().catch(() => undefined); // waits, unready, for the operator: never resolves here
    while (!/bound in cluster/.test(lease.snapshot().message)) await new Promise((r) => setTimeout(r, 100));
    expect(t.of('assign')).toEqual([]);
    expect(old.t.assignment).toBeDefined();
  });

  it('with --retire-etcd: the old cluster is retired, its holder fences at once, and the new cluster mints only above it (generation 2)', async () => {
    const { first, second, prefix, book, old } = await twoClusters('retire-moved');
    const report = await markRegionRestored(io(second, prefix), REGION, { ttlMs: 2000, retire: io(first, prefix) });
    expect(report).toMatchObject({ generation: 2, oldCluster: 'retired' });
    // The retire deleted its worker key: the holder's watch fences it without waiting for its deadline.
    await old.t.waitFor((e) => e.kind === 'unassign', 5_000, 'the fence of the retired cluster’s holder');
    const oldCeiling = highestCeiling(old.t);

    const firstBinding = parseRegionBinding(
      'k',
      (await io(first, prefix).client.get(regionBindingKey(prefix)).string()) ?? '',
    );
    expect(firstBinding.retired).toMatchObject({ byClusterId: report.clusterId, generation: 2 });
    const secondBinding = parseRegionBinding(
      'k',
      (await io(second, prefix).client.get(regionBindingKey(prefix)).string()) ?? '',
    );
    expect(secondBinding).toMatchObject({ generation: 2, previousClusterId: firstBinding.clusterId });

    const fresh = holder(second, prefix, 'retire-moved-new', book);
    await fresh.lease.start();
    expect(fresh.t.of('assign')[0]?.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(oldCeiling);
    expect(book.violations).toEqual([]);

    // The retired cluster takes no holder again: a node started there refuses with one line.
    const late = createEtcdLease(options(first, prefix, 'retire-moved-late'), new RecordingTarget('late'));
    leases.push(late);
    const e = await refusal(late.start());
    expect(e.message).toMatch(
      /^region 2 moved out of this etcd \(.*retired at .*it now lives in cluster \d+, generation 2\)/,
    );
    expect(old.lease.snapshot().state).not.toBe('alive');
  });

  it('with --old-etcd-stopped on a stopped cluster: the move goes on without reaching it', async () => {
    const { first, second, prefix, book, old } = await twoClusters('retire-stopped');
    await first.stop();
    const report = await markRegionRestored(io(second, prefix), REGION, { ttlMs: 2000, oldClusterStopped: true });
    expect(report).toMatchObject({ generation: 2, oldCluster: 'stated-stopped' });
    const fresh = holder(second, prefix, 'retire-stopped-new', book);
    await fresh.lease.start();
    expect(fresh.t.of('assign')[0]?.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(highestCeiling(old.t));
    expect(book.violations).toEqual([]);
  });
});
