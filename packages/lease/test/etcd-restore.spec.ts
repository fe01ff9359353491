// An etcd restored from its snapshot (docs/design.md §5, "a rewound etcd is never trusted"; docs/runbook.md, "etcd
// restored from a snapshot"): a real `etcdctl snapshot save`, claims before and after it, then `etcdctl snapshot restore`
// on the same URL, back at once (within a TTL). The restored etcd has neither the post-snapshot holder's lease nor its
// worker key nor its last-ms: without the rules below a new claimer starts at once with floor epoch − 1.
import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, startEtcd, tempDir, type EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { join } from 'node:path';
import { createEtcdLease } from '../src/etcd-lease.js';
import { RecordingTarget, SlotBook, uniquePrefix } from '../src/recording-target.test-helper.js';
import { markRegionRestored } from '../src/region-restore.js';
import type { EtcdLeaseOptions } from '../src/config.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(120_000);

// TTL − margin (5 s) outlasts a restore (etcd stopped, restored, started) on a loaded machine: at 3 s, one run at load
// 30 fenced the pre-snapshot holder at its own deadline before it could see the revision go back.
const TTL_MS = 6000;
const REGION = 2;
const leases: WorkerLease[] = [];

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  await cleanupAll();
});

function options(etcd: EtcdServer, prefix: string, nodeId: string): EtcdLeaseOptions {
  return {
    endpoints: [etcd.clientUrl],
    prefix,
    region: REGION,
    workers: '0-1',
    nodeId,
    ttlSeconds: TTL_MS / 1000,
    keepAliveIntervalMs: 500,
    keepAliveTimeoutMs: 400,
    fenceMarginMs: 1000,
    requestTimeoutMs: 1500,
    backoff: { initialMs: 50, maxMs: 400 },
  };
}

function holder(
  etcd: EtcdServer,
  prefix: string,
  name: string,
  book: SlotBook,
): { lease: WorkerLease; t: RecordingTarget } {
  const t = new RecordingTarget(name, book);
  const lease = createEtcdLease(options(etcd, prefix, name), t);
  leases.push(lease);
  return { lease, t };
}

/** The highest millisecond a target was ever allowed to mint in (its highest wall ceiling). */
function highestCeiling(t: RecordingTarget): number {
  const ceilings = t.events.flatMap((e) => [e.ceiling ?? -1, e.assignment?.ceilingMs ?? -1]);
  return Math.max(...ceilings);
}

async function beforeAndAfterSnapshot(name: string) {
  const etcd = await startEtcd();
  const prefix = uniquePrefix(name);
  await bindRegion(etcd, REGION, prefix);
  const book = new SlotBook();
  const before = holder(etcd, prefix, `${name}-before`, book);
  await before.lease.start();
  await before.t.waitFor((e) => e.kind === 'extend', 10_000, 'a keep-alive before the snapshot');
  const dir = await tempDir('idgen-snapshot');
  const snapshot = join(dir.path, 'snap.db');
  await etcd.snapshot(snapshot);
  const after = holder(etcd, prefix, `${name}-after`, book);
  await after.lease.start();
  await after.t.waitFor((e) => e.kind === 'extend', 10_000, 'a keep-alive after the snapshot');
  return { etcd, prefix, book, before, after, snapshot };
}

describe('etcd restored from a snapshot', () => {
  it('with a new cluster token: both holders fence, a node started meanwhile waits (unready) for idgen region restored, then every one (the old holders too, on their own) above every old ceiling', async () => {
    const { etcd, prefix, book, before, after, snapshot } = await beforeAndAfterSnapshot('restore-token');
    await etcd.restore(snapshot, { clusterToken: `restored-${Date.now()}` });
    // Both see the restored history: the post-snapshot holder's lease is gone, the other's answers come from another
    // cluster ID. Each fences and may not claim again on it.
    await after.t.waitFor((e) => e.kind === 'unassign', 30_000, 'the post-snapshot holder fenced');
    await before.t.waitFor((e) => e.kind === 'unassign', 30_000, 'the pre-snapshot holder fenced');

    // A node started now is refused by the binding, and waits (unready) for the operator rather than give up: under
    // systemd's RestartPreventExitStatus=2 an exit would keep it down after the step.
    const freshTarget = new RecordingTarget('restore-token-new', book);
    const fresh = createEtcdLease({ ...options(etcd, prefix, 'restore-token-new'), workers: '2-2' }, freshTarget);
    leases.push(fresh);
    const starting = fresh.start().then(
      () => 'started',
      (e: unknown) => e,
    );
    const deadline = performance.now() + 20_000;
    while (!/reports cluster .* bound in cluster .*idgen region restored/.test(fresh.snapshot().message)) {
      if (performance.now() > deadline) throw new Error(`no binding refusal seen: ${fresh.snapshot().message}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(fresh.snapshot().state).toBe('claiming');

    const kv = new Etcd3({ hosts: [etcd.clientUrl] });
    try {
      const report = await markRegionRestored({ client: kv, prefix, timeoutMs: 2000, layout: DEFAULT_LAYOUT }, REGION, {
        ttlMs: TTL_MS,
        oldClusterStopped: true, // the restore replaced the only member's data: the old cluster is gone
      });
      expect(report.written).toBe(DEFAULT_LAYOUT.maxWorker + 1);
      expect(report.clusterId).not.toBe(report.previousClusterId);
    } finally {
      kv.close();
    }
    // Until the operator's step the old holders, re-claiming all along, were refused by the binding too.
    expect(before.t.of('assign')).toHaveLength(1);
    expect(after.t.of('assign')).toHaveLength(1);
    const oldCeiling = Math.max(highestCeiling(before.t), highestCeiling(after.t));
    expect(await starting).toBe('started');
    expect(freshTarget.of('assign')[0]?.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(oldCeiling);
    // After it, the running old holders come back on their own (they never stopped asking), above every old ceiling.
    for (const t of [before.t, after.t]) {
      const first = t.of('assign')[0];
      const again = await t.waitFor((e) => e.kind === 'assign' && e !== first, 30_000, `${t.name} back`);
      expect(again.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(oldCeiling);
    }
    expect(book.violations).toEqual([]);
  });

  it('with the old token (same cluster ID): each holder detects the rewind, fences, and claims again only above its old ceiling', async () => {
    const { etcd, book, before, after, snapshot } = await beforeAndAfterSnapshot('restore-same');
    await etcd.restore(snapshot);
    // The post-snapshot holder's lease is unknown to the restored etcd; the pre-snapshot one's lease is there, but the
    // revision of the answers went back below what it had seen.
    const reclaimed = (t: RecordingTarget) =>
      t.waitFor(
        (e) => e.kind === 'assign' && t.of('unassign').length > 0 && e.mono > (t.of('unassign')[0]?.mono ?? Infinity),
        30_000,
        `${t.name}: fenced, then a new slot`,
      );
    const [a, b] = await Promise.all([reclaimed(after.t), reclaimed(before.t)]);
    // Whichever comes first: the keep-alive (lease unknown), a lower revision, its watch seeing the other holder claim
    // its slot on the restored history, or, on a loaded machine where the restore outlasts TTL − margin, its own
    // deadline (seen once beside a CI run). Either way the floors below must clear both old ceilings.
    expect(after.t.of('unassign')[0]?.message).toMatch(
      /lease .* has expired|went back|worker key .* was (deleted|overwritten)|no keep-alive acknowledged in time/,
    );
    expect(before.t.of('unassign')[0]?.message).toMatch(/revision went back/);
    // Every slot was unclean as of the detection: the new floors are above everything either could mint before.
    const oldCeilingOf = (t: RecordingTarget): number =>
      Math.max(
        ...t.events
          .filter((e) => e.mono < (t.of('unassign')[0]?.mono ?? 0))
          .map((e) => e.ceiling ?? e.assignment?.ceilingMs ?? -1),
      );
    expect(a.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(
      Math.max(oldCeilingOf(before.t), oldCeilingOf(after.t)),
    );
    expect(b.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(
      Math.max(oldCeilingOf(before.t), oldCeilingOf(after.t)),
    );
    expect(book.violations).toEqual([]);
  });

  it('with the old token, a node started after the restore (no memory of the lost history) mints nothing below what the lost holder could mint: the start hold', async () => {
    const etcd = await startEtcd();
    const prefix = uniquePrefix('restore-fresh');
    await bindRegion(etcd, REGION, prefix);
    const book = new SlotBook();
    const dir = await tempDir('idgen-snapshot');
    const snapshot = join(dir.path, 'snap.db');
    await etcd.snapshot(snapshot); // before any claim: the restored etcd knows no holder, lease or last-ms at all
    const lost = new RecordingTarget('restore-fresh-lost', book);
    const lostLease = createEtcdLease({ ...options(etcd, prefix, 'restore-fresh-lost'), workers: '0-0' }, lost);
    leases.push(lostLease);
    await lostLease.start();
    await lost.waitFor((e) => e.kind === 'extend', 10_000, 'a keep-alive of the holder the restore will lose');
    await etcd.restore(snapshot);
    const lostCeiling = highestCeiling(lost);
    // A node started now trusts records that say the region was never used (same cluster ID, no binding change): on
    // the records alone its floor is epoch − 1, beside the lost holder until that one's next keep-alive is refused.
    const fresh = holder(etcd, prefix, 'restore-fresh-new', book);
    await fresh.lease.start();
    const claim = fresh.t.of('assign')[0];
    expect(claim?.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(lostCeiling);
    expect(book.violations).toEqual([]);
  });

  it('a spare waiting across the restore, and both old holders: every slot claimed on the restored history starts above what the lost holders could mint', async () => {
    const { etcd, prefix, book, before, after, snapshot } = await beforeAndAfterSnapshot('restore-spare');
    // Both slots are held: the spare waits, asking again and again (its claims see the post-snapshot revisions).
    const t = new RecordingTarget('restore-spare-waiting', book);
    const spare = createEtcdLease({ ...options(etcd, prefix, 'restore-spare-waiting'), waitForFreeSlot: true }, t);
    leases.push(spare);
    const started = spare.start().catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 1500)); // a few refused claims first (nothing is asserted on time)
    expect(t.of('assign')).toEqual([]);
    const ceilingBefore = Math.max(highestCeiling(after.t), highestCeiling(before.t));
    const restoredAt = performance.now();
    await etcd.restore(snapshot);
    // The restored etcd has no worker key, lease or last-ms for the post-snapshot holder's slot: on records alone a
    // claimer would start at once, at floor epoch − 1, beside that holder. Whoever claims the two slots now (the spare
    // or an old holder claiming again) must start above everything the lost history could mint.
    const targets = [before.t, after.t, t];
    const claimsAfter = () => targets.flatMap((x) => x.of('assign').filter((e) => e.mono > restoredAt));
    const deadline = performance.now() + 60_000;
    while (claimsAfter().length < 2 && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const claims = claimsAfter();
    for (const c of claims) expect(c.assignment?.floorMs ?? Number.NaN).toBeGreaterThan(ceilingBefore);
    expect(claims.length).toBeGreaterThanOrEqual(2);
    expect(book.violations).toEqual([]);
    await spare.release();
    await started;
  });
});
