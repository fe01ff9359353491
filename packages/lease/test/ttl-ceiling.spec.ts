// The deployment's lease TTL ceiling (docs/design.md §5, "The TTL ceiling"; §8, the threat "TTLs that differ", issue 31
// case 3), against real etcd servers and a real `etcdctl snapshot save`/`restore`: pinned once, refused when a holder's
// TTL is longer, and the hold that covers a holder no record shows waits by it. The DR case is the runbook's: the old
// etcd host is gone (here: paused, so the holder it served mints on, cut off, until its own deadline), the snapshot is
// restored onto a new URL with a new token, `idgen region restored` runs with the default --lease-ttl, and a node with a
// shorter TTL than the lost holder's starts there. Without the ceiling its floor is the mark + its own TTL, seconds below
// what the lost holder may still mint. On an etcd with no ceiling at all (a backup from before the pin), no node starts.
import { DEFAULT_LAYOUT } from '@idgen/core';
import { cleanupAll, startEtcd, tempDir, type EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { join } from 'node:path';
import { createEtcdLease } from '../src/etcd-lease.js';
import { RecordingTarget, SlotBook, uniquePrefix } from '../src/recording-target.test-helper.js';
import { initRegion } from '../src/region-init.js';
import { markRegionRestored } from '../src/region-restore.js';
import { TtlCeilingError, pinTtlCeiling, readTtlCeiling, ttlCeilingKey } from '../src/ttl-ceiling.js';
import { leaseKeys } from '../src/records.js';
import type { EtcdLeaseOptions } from '../src/config.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(240_000);

const REGION = 2;
const leases: WorkerLease[] = [];
const clients: Etcd3[] = [];
let etcd: EtcdServer;

beforeAll(async () => {
  etcd = await startEtcd();
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  for (const c of clients) c.close();
  await cleanupAll();
});

function client(e: EtcdServer): Etcd3 {
  const c = new Etcd3({ hosts: [e.clientUrl] });
  clients.push(c);
  return c;
}

function io(e: EtcdServer, prefix: string) {
  return { client: client(e), prefix, timeoutMs: 5000, layout: DEFAULT_LAYOUT };
}

function options(e: EtcdServer, prefix: string, nodeId: string, ttlSeconds: number): EtcdLeaseOptions {
  return {
    endpoints: [e.clientUrl],
    prefix,
    region: REGION,
    workers: '0-0',
    nodeId,
    ttlSeconds,
    keepAliveIntervalMs: 500,
    keepAliveTimeoutMs: 400,
    fenceMarginMs: 1000,
    requestTimeoutMs: 1500,
    backoff: { initialMs: 50, maxMs: 400 },
  };
}

function holder(e: EtcdServer, prefix: string, name: string, ttlSeconds: number, book: SlotBook) {
  const t = new RecordingTarget(name, book);
  const lease = createEtcdLease(options(e, prefix, name, ttlSeconds), t);
  leases.push(lease);
  return { lease, t };
}

/** The highest millisecond a target was ever allowed to mint in (its highest wall ceiling). */
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

describe('the lease TTL ceiling', () => {
  it('is pinned once: the same value again writes nothing, another is refused, and so is one below a recorded TTL', async () => {
    const prefix = uniquePrefix('ceiling-pin');
    const first = await pinTtlCeiling({ ...io(etcd, prefix), now: () => Date.parse('2026-12-07T03:00:00Z') }, 20);
    expect(first).toEqual({ record: { ttlCeilingSeconds: 20, at: '2026-12-07T03:00:00.000Z' }, changed: true });
    expect(await pinTtlCeiling(io(etcd, prefix), 20)).toMatchObject({ changed: false });
    const other = await refusal(pinTtlCeiling(io(etcd, prefix), 30));
    expect(other).toBeInstanceOf(TtlCeilingError);
    expect(other.message).toMatch(/pinned at 20 s .* not 30 s: a ceiling is pinned once/);
    expect((await refusal(pinTtlCeiling(io(etcd, prefix), 1))).message).toMatch(/from 2 to 3600, got 1/);

    // An existing deployment pinned late: a holder's record says it ran on 30 s, so a ceiling of 10 s is refused.
    const late = uniquePrefix('ceiling-late');
    const kv = client(etcd);
    await kv
      .put(leaseKeys.lastMs(late, REGION, 3))
      .value(JSON.stringify({ ms: Date.now(), released: false, nodeId: 'old', at: 'x', ttlMs: 30_000 }));
    const low = await refusal(pinTtlCeiling(io(etcd, late), 10));
    expect(low.message).toMatch(/last-ms\/3 was written by a holder with a 30 s TTL, above the ceiling of 10 s/);
    expect(await readTtlCeiling(io(etcd, late))).toBeUndefined();
    expect(await pinTtlCeiling(io(etcd, late), 30)).toMatchObject({ changed: true });
  });

  it('region init pins it beside the binding; a holder with a longer TTL refuses to start with one line', async () => {
    const prefix = uniquePrefix('ceiling-refuse');
    const init = await initRegion(io(etcd, prefix), REGION, { ttlCeilingSeconds: 3 });
    expect(init.ceiling?.ttlCeilingSeconds).toBe(3);
    expect(await client(etcd).get(ttlCeilingKey(prefix)).string()).toMatch(/"ttlCeilingSeconds":3/);
    const t = new RecordingTarget('ceiling-too-long');
    const lease = createEtcdLease(options(etcd, prefix, 'ceiling-too-long', 4), t);
    leases.push(lease);
    const e = await refusal(lease.start());
    expect(e).toBeInstanceOf(TtlCeilingError);
    expect(e.message).toMatch(
      /^lease TTL 4 s is above this deployment's TTL ceiling of 3 s \(\/[^)]*\/lease-ceiling\)/,
    );
    expect(e.message).not.toContain('\n');
    expect(t.of('assign')).toEqual([]);
  });

  it('a holder with a shorter TTL than the ceiling still holds by the ceiling: its start hold is claim + ceiling + bound', async () => {
    const prefix = uniquePrefix('ceiling-hold');
    await initRegion(io(etcd, prefix), REGION, { ttlCeilingSeconds: 6 });
    const { lease, t } = holder(etcd, prefix, 'ceiling-hold', 2, new SlotBook());
    const startedAt = Date.now();
    await lease.start();
    const floor = t.of('assign')[0]?.assignment?.floorMs ?? Number.NaN;
    expect(floor).toBeGreaterThanOrEqual(startedAt + 6000 + 10);
  });

  it("the runbook's DR path (old host gone, restore onto a new URL and token, region restored with the default TTL): a node with a shorter TTL starts above everything the lost holder may mint", async () => {
    const old = await startEtcd();
    const prefix = uniquePrefix('ceiling-dr');
    await initRegion(io(old, prefix), REGION, { ttlCeilingSeconds: 20 });
    const dir = await tempDir('idgen-snapshot');
    const snapshot = join(dir.path, 'snap.db');
    await old.snapshot(snapshot); // the last backup: the binding and the ceiling, no holder yet
    const book = new SlotBook();
    const lost = holder(old, prefix, 'ceiling-dr-lost', 20, book);
    await lost.lease.start();
    await lost.t.waitFor((e) => e.kind === 'extend', 10_000, 'a keep-alive of the holder the restore will lose');
    old.pause(); // the old host is gone for the operator; its holder, cut off, mints on until its own deadline

    const moved = await startEtcd();
    await moved.restore(snapshot, { clusterToken: `moved-${Date.now()}` });
    const report = await markRegionRestored(io(moved, prefix), REGION, { ttlMs: 6000, oldClusterStopped: true });
    expect(report.ttlMs).toBe(20_000); // the ceiling, not --lease-ttl
    const lostCeiling = highestCeiling(lost.t);
    const fresh = holder(moved, prefix, 'ceiling-dr-new', 2, book);
    await fresh.lease.start();
    const floor = fresh.t.of('assign')[0]?.assignment?.floorMs ?? Number.NaN;
    // On the code before the ceiling: the mark + 6 s and the claim + 2 s, seconds below the lost holder's ceiling.
    expect(floor).toBeGreaterThan(lostCeiling);
    expect(book.violations).toEqual([]);
    old.resume();
  });

  it('an etcd with no ceiling (a backup from before the pin, restored onto a new cluster): no node starts there until it is pinned, then above everything the lost holder may mint', async () => {
    const old = await startEtcd();
    const prefix = uniquePrefix('ceiling-none');
    // The last backup predates the pin: the binding and no ceiling, as on a deployment bound by an earlier release.
    await initRegion(io(old, prefix), REGION, { ttlCeilingSeconds: 20 });
    const kv = client(old);
    const pinned = (await kv.get(ttlCeilingKey(prefix)).string()) ?? '';
    await kv.delete().key(ttlCeilingKey(prefix));
    const dir = await tempDir('idgen-snapshot');
    const snapshot = join(dir.path, 'snap.db');
    await old.snapshot(snapshot);
    await kv.put(ttlCeilingKey(prefix)).value(pinned); // pinned after the backup
    const book = new SlotBook();
    const lost = holder(old, prefix, 'ceiling-none-lost', 20, book);
    await lost.lease.start();
    await lost.t.waitFor((e) => e.kind === 'extend', 10_000, 'a keep-alive of the holder the restore will lose');
    old.pause(); // the old host is gone for the operator; its holder, cut off, mints on until its own deadline

    const moved = await startEtcd();
    await moved.restore(snapshot, { clusterToken: `moved-${Date.now()}` });
    const report = await markRegionRestored(io(moved, prefix), REGION, { ttlMs: 6000, oldClusterStopped: true });
    expect(report.ttlMs).toBe(6000); // no ceiling to mark by: the marks cover a 6 s holder, not the lost 20 s one
    expect(await readTtlCeiling(io(moved, prefix))).toBeUndefined();
    const lostCeiling = highestCeiling(lost.t);
    const fresh = holder(moved, prefix, 'ceiling-none-new', 2, book);
    // On the code before the rule the node started here, by its own TTL: its floor seconds below the lost holder's ceiling.
    const e = await refusal(fresh.lease.start());
    expect(e).toBeInstanceOf(TtlCeilingError);
    expect(e.message).toMatch(
      /^this etcd has no lease TTL ceiling \(\/[^)]*\/lease-ceiling\): pin it with idgen region init --region 2 --lease-ttl-ceiling S /,
    );
    expect(e.message).not.toContain('\n');
    expect(fresh.t.of('assign')).toEqual([]);

    // The operator pins it (`region init` on a bound etcd only adds the record): the node starts, above the lost holder.
    await initRegion(io(moved, prefix), REGION, { ttlCeilingSeconds: 20 });
    await fresh.lease.start();
    const floor = fresh.t.of('assign')[0]?.assignment?.floorMs ?? Number.NaN;
    expect(floor).toBeGreaterThan(lostCeiling);
    expect(book.violations).toEqual([]);
    old.resume();
  });

  it('a running holder whose re-claim finds the ceiling gone keeps asking, not ready, until it is pinned again', async () => {
    const prefix = uniquePrefix('ceiling-gone');
    await initRegion(io(etcd, prefix), REGION, { ttlCeilingSeconds: 2 });
    const { lease, t } = holder(etcd, prefix, 'ceiling-gone', 2, new SlotBook());
    await lease.start();
    const kv = client(etcd);
    const pinned = (await kv.get(ttlCeilingKey(prefix)).string()) ?? '';
    await kv.delete().key(ttlCeilingKey(prefix)); // what a restore from a backup taken before the pin leaves
    let stop = (): void => undefined;
    const asking = new Promise<string>((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error('the re-claim never asked for the pin (hang guard)')), 30_000);
      const off = lease.on('state', (snap) => {
        if (snap.state === 'claiming' && /no lease TTL ceiling/.test(snap.message)) resolve(snap.message);
      });
      stop = (): void => {
        clearTimeout(guard);
        off();
      };
    });
    // Its worker key deleted under it (as a forged release would): it fences at once and claims again.
    await kv.delete().key(leaseKeys.worker(prefix, REGION, 0));
    try {
      expect(await asking).toMatch(
        /claim failed \(TtlCeilingError: this etcd has no lease TTL ceiling .* idgen region init --region 2 /,
      );
    } finally {
      stop();
    }
    expect(t.of('assign')).toHaveLength(1); // nothing claimed on the etcd without a ceiling
    await kv.put(ttlCeilingKey(prefix)).value(pinned);
    await t.waitFor(() => t.of('assign').length === 2, 30_000, 'the slot claimed again once the ceiling is pinned');
    expect(lease.snapshot().state).toBe('alive');
  });
});
