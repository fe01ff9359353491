// A child process whose lease sessions all end while their claim transaction is out, then releases the lease and
// ends by itself (no process.exit): nothing the lease made may keep the process alive after release().
// Configuration: IDGEN_TEST_ETCD, the etcd client URL; IDGEN_TEST_PREFIX, the key prefix (bound to region 2 by the
// parent, as `idgen region init` would). Prints one JSON object a line: claim-failed, released.
//
// etcd is reached through a proxy adding 100 ms each way, and the fence deadline is 100 ms after a grant is sent:
// every grant is answered after its session's deadline, so the session is fenced (a timer due at once) before the
// claim sent right after the grant can be answered (a round trip of at least 200 ms through the proxy).
import { createTcpProxy } from '@idgen/testing';
import { createEtcdLease } from '../src/index.js';
import type { LeaseTarget } from '../src/index.js';

const print = (o: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify(o)}\n`);
};

const target: LeaseTarget = {
  assign: () => print({ event: 'assigned' }),
  extend: () => undefined,
  unassign: () => undefined,
  lastMintedMs: () => -1,
};

async function main(): Promise<void> {
  const etcd = new URL(process.env['IDGEN_TEST_ETCD'] ?? '');
  const proxy = await createTcpProxy({ target: etcd.host, latencyMs: 100 });
  const lease = createEtcdLease(
    {
      endpoints: [`http://${proxy.address}`],
      prefix: process.env['IDGEN_TEST_PREFIX'] ?? `/idgen-test/mid-claim-${process.pid}`,
      region: 2,
      workers: '30-30',
      ttlSeconds: 2,
      fenceMarginMs: 1900,
      keepAliveIntervalMs: 50,
      keepAliveTimeoutMs: 40,
      requestTimeoutMs: 5000,
      backoff: { initialMs: 10, maxMs: 50 },
    },
    target,
  );
  const claimsFailed = new Promise<string>((resolve) => {
    let failed = 0;
    lease.on('state', (s) => {
      // Two sessions ended mid-claim, the second one's retry under way.
      if (s.state === 'claiming' && s.message.startsWith('claim failed') && ++failed === 2) resolve(s.message);
    });
  });
  const started = lease.start().catch((e: unknown) => e);
  print({ event: 'claim-failed', message: await claimsFailed });
  await lease.release();
  await started;
  await proxy.close();
  print({ event: 'released' });
}

void main();
