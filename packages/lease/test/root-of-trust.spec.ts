import { performance } from 'node:perf_hooks';
import { createGuardedMinter, isFencedError } from '@idgen/clock-guard';
import { bindRegion, cleanupAll, startEtcd } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { createEtcdLease } from '../src/etcd-lease.js';
import { leaseKeys } from '../src/records.js';
import { uniquePrefix } from '../src/recording-target.test-helper.js';

jest.setTimeout(60_000);

// docs/design.md §5, root of trust: whoever may write the prefix can forge a release. Two etcdctl commands
// (delete the worker key, put last-ms {"ms":0,"released":true}) let a second node mint at once. The holder
// watches its own worker key and fences on the change, not at its next refresh (up to a keep-alive interval).

let etcd: EtcdServer;
let operator: Etcd3;

beforeAll(async () => {
  etcd = await startEtcd();
  operator = new Etcd3({ hosts: [etcd.clientUrl] });
});

afterAll(async () => {
  operator?.close();
  await cleanupAll();
});

it('a holder fences at once when its worker key is deleted under it (a forged release), by its watch', async () => {
  const prefix = uniquePrefix('forged');
  await bindRegion(etcd, 4, prefix, { ttlCeilingSeconds: 30 });
  const guard = createGuardedMinter({ region: 4 });
  // Refreshes every 10 s (the production default is 2 s): the refresh would fence too, at the first one after the
  // forgery, with another message. The test judges which came first, so the refresh is far enough away that a
  // watch event delayed by a loaded machine (its latency is printed below) still comes first.
  const lease = createEtcdLease(
    {
      endpoints: [etcd.clientUrl],
      prefix,
      region: 4,
      workers: '11-11',
      ttlSeconds: 30,
      keepAliveIntervalMs: 10_000,
      requestTimeoutMs: 2000,
    },
    guard,
  );
  try {
    await lease.start();
    expect(typeof guard.next()).toBe('bigint');
    // The watch starts at the revision right after the claim: it reports the delete below even if it connects
    // after it.

    const forgedAt = performance.now();
    await operator.delete().key(leaseKeys.worker(prefix, 4, 11));
    await operator.put(leaseKeys.lastMs(prefix, 4, 11)).value('{"ms":0,"released":true}');
    let fencedAfterMs = Number.NaN;
    let reason = '';
    while (performance.now() - forgedAt < 20_000) {
      try {
        guard.next();
      } catch (e) {
        if (!isFencedError(e)) throw e;
        fencedAfterMs = performance.now() - forgedAt;
        reason = e.message;
        break;
      }
      await new Promise((r) => setImmediate(r));
    }
    // The fence names the watch, not the refresh ("no longer held by this lease").
    expect(reason).toMatch(/worker key .* was deleted under this holder: fenced at once/);
    expect(guard.status()).toMatchObject({ state: 'fenced' });
    process.stdout.write(
      `root of trust: the holder fenced ${fencedAfterMs.toFixed(1)} ms after the forged delete (watch latency)\n`,
    );
  } finally {
    await lease.release();
    guard.close();
  }
});
