// A claim transaction that commits while its answer is lost (a partition right after the request left): the lease
// must ask again on the same lease, and adopt the key it finds bound to it. Giving that lease up instead leaves the
// key bound to it until etcd hears the revoke, which the partition may have swallowed too: a retry on a new lease
// then finds its own slot held, and with one slot and no waiting, the start fails although the slot is its own.
import { createTcpProxy } from '@idgen/testing';
import type { Etcd3 } from 'etcd3';
import { useLeaseHarness } from './etcd-harness.test-helper.js';
import { leaseKeys } from '../src/records.js';
import { RecordingTarget, uniquePrefix } from '../src/recording-target.test-helper.js';

jest.setTimeout(120_000);

const harness = useLeaseHarness(2);
let kv: Etcd3;
beforeAll(() => ({ kv } = harness.current()));

it('a claim whose answer is lost is asked again on the same lease, and the slot it committed is adopted', async () => {
  const prefix = uniquePrefix('answer-lost');
  const workerKey = leaseKeys.worker(prefix, 2, 5);
  const proxy = await createTcpProxy({ target: harness.current().etcd.clientUrl });
  // After the first warning once the claim left (the lease has given up waiting for its answer), the link comes back.
  let afterCut = false;
  let restored: () => void = () => undefined;
  const restoredOnce = new Promise<void>((r) => (restored = r));
  const warnings: string[] = [];
  const logger = {
    info: () => undefined,
    error: () => undefined,
    warn: (fields: Record<string, unknown>, msg: string) => {
      warnings.push(`${msg} ${JSON.stringify(fields)}`);
      if (afterCut && proxy.isCut) {
        proxy.restore();
        restored();
      }
    },
  };
  const target = new RecordingTarget('t');
  const l = harness.lease(
    harness.options(prefix, {
      endpoints: [`http://${proxy.address}`],
      workers: '5-5', // one slot: a retry that finds it held has nowhere else to go
      ttlSeconds: 10, // the first claim's lease outlives the whole test unless revoked
      keepAliveIntervalMs: 2000,
      keepAliveTimeoutMs: 1000,
      requestTimeoutMs: 1000,
      logger,
    }),
    target,
  );
  const cut = proxy.cutAfterSending(workerKey).then(() => (afterCut = true));
  const started = l.start();
  await cut;

  // etcd, read directly (not through the cut link), committed the claim: the key is bound to the first lease.
  let firstLease: string | undefined;
  for (let i = 0; i < 200 && firstLease === undefined; i++) {
    const kvs = (await kv.get(workerKey).exec()).kvs;
    firstLease = kvs[0]?.lease;
    if (firstLease === undefined) await new Promise((r) => setTimeout(r, 50));
  }
  expect(firstLease).toBeDefined();

  await restoredOnce;
  await started;
  expect(l.snapshot()).toMatchObject({ state: 'alive', worker: 5, leaseId: firstLease });
  expect((await kv.get(workerKey).exec()).kvs[0]?.lease).toBe(firstLease);
  expect(warnings.some((w) => w.includes('adopted a worker key our own lease already held'))).toBe(true);
  expect(target.of('assign')).toHaveLength(1);
  await proxy.close();
});
