// idgen audit on a slot whose holder died during its claim, right after its first last-ms left, on a real etcd: the
// holder's link to etcd is cut just after that write is sent (a TCP proxy, @idgen/testing's), its lease is revoked (the
// crash: its worker key goes) and it is stopped. The first last-ms (at the floor, ahead of the clock in the start hold)
// and the open tenure are written in one transaction (docs/design.md §5), so the tenure that allowed that last-ms is on
// record and the audit is clean. Written apart, as before, the tenure never reached the record and the audit reported
// the slot ("last-ms … is above …, what the last tenure allowed"), which it cannot tell from a holder that minted
// without a tenure: that real violation, a last-ms above the last tenure that no claim wrote, is still reported.
import { Etcd3 } from 'etcd3';
import { createEtcdLease, type EtcdLeaseOptions, type LeaseTarget, type WorkerLease } from '@idgen/lease';
import { leaseKeys, parseLastMsRecord, parseTenureRecord, type LastMsRecord } from '@idgen/lease/records';
import {
  QUICK_LEASE_SETTINGS,
  bindRegion,
  cleanupAll,
  createTcpProxy,
  startEtcd,
  type EtcdServer,
} from '@idgen/testing';
import { idgen } from './support.test-helper.js';

jest.setTimeout(120_000);

/** A target that mints nothing: the claim's records are what is checked. */
const target = (): LeaseTarget => ({
  assign: () => undefined,
  extend: () => undefined,
  unassign: () => undefined,
  lastMintedMs: () => -1,
});

let etcd: EtcdServer;
let kv: Etcd3;
const leases: WorkerLease[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
  kv = new Etcd3({ hosts: [etcd.clientUrl] });
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  kv?.close();
  await cleanupAll();
});

function holder(o: Partial<EtcdLeaseOptions> & { prefix: string; nodeId: string }): WorkerLease {
  const l = createEtcdLease(
    { endpoints: [etcd.clientUrl], region: 1, workers: '19-19', ...QUICK_LEASE_SETTINGS, ...o },
    target(),
  );
  leases.push(l);
  return l;
}

/** A first holder of slot 1/19 under `prefix`, started and released: its tenure is closed at its final last-ms. */
async function usedSlot(prefix: string): Promise<LastMsRecord> {
  await bindRegion(etcd, 1, prefix);
  const first = holder({ prefix, nodeId: 'first' });
  await first.start();
  await first.release();
  const key = leaseKeys.lastMs(prefix, 1, 19);
  return parseLastMsRecord(key, (await kv.get(key).string()) ?? '');
}

const audit = (prefix: string): ReturnType<typeof idgen> =>
  idgen(['audit', '--etcd', etcd.clientUrl, '--etcd-prefix', prefix]);

describe('idgen audit after a claim cut short', () => {
  it("a holder that dies right after its claim's first last-ms left it with its tenure: the audit is clean", async () => {
    const prefix = '/window';
    const released = await usedSlot(prefix);
    const proxy = await createTcpProxy({ target: etcd.clientUrl });
    const dying = holder({ prefix, nodeId: 'dying', kind: 'embedded', endpoints: [`http://${proxy.address}`] });
    // Cut just after the first request carrying a last-ms record (the claim carries none): it reaches etcd, nothing
    // after it does.
    const cut = proxy.cutAfterSending('"released":false');
    const started = dying.start().catch((e: unknown) => e);
    await cut;
    const lastKey = leaseKeys.lastMs(prefix, 1, 19);
    let mine: LastMsRecord | undefined;
    for (let i = 0; i < 100 && mine === undefined; i++) {
      const r = parseLastMsRecord(lastKey, (await kv.get(lastKey).string()) ?? '');
      if (r.nodeId === 'dying') mine = r;
      else await new Promise((r) => setTimeout(r, 50));
    }
    expect(mine).toMatchObject({ released: false, nodeId: 'dying' });
    const leaseId = mine?.leaseId ?? '';
    // At the floor, ahead of the clock: above everything the last closed tenure allowed.
    expect(mine?.ms).toBeGreaterThan(released.ms);
    // The crash: its lease revoked (the worker key goes with it), its link gone, the holder stopped.
    await kv.leaseClient.leaseRevoke({ ID: leaseId });
    await proxy.close();
    await dying.release();
    await started;
    expect(await kv.get(leaseKeys.worker(prefix, 1, 19)).string()).toBeNull();

    const r = await audit(prefix);
    expect(r).toEqual({
      code: 0,
      stdout: expect.stringMatching(/^audit: 1 of 1 region\(s\) read, 1 slot\(s\), 2 tenure\(s\) on record: clean\n$/),
      stderr: '',
    });
    // Clean because the tenure that allowed that last-ms is on record with it (open: its holder never closed it).
    const tenureKey = leaseKeys.tenures(prefix, 1, 19);
    const record = parseTenureRecord(tenureKey, (await kv.get(tenureKey).string()) ?? '');
    expect(record.tenures.map((t) => [t.nodeId, t.leaseId === leaseId, t.end])).toEqual([
      ['first', false, 'released'],
      ['dying', true, 'open'],
    ]);
  });

  it('a last-ms above what the last tenure allowed, that no claim wrote, is still a violation', async () => {
    const prefix = '/forged';
    const released = await usedSlot(prefix);
    expect((await audit(prefix)).code).toBe(0);
    // As a holder that minted with no tenure on record would leave it: its own last-ms, its worker key gone.
    const lastKey = leaseKeys.lastMs(prefix, 1, 19);
    const ghost: LastMsRecord = {
      ms: released.ms + 5000,
      released: false,
      nodeId: 'ghost',
      leaseId: '4242',
      at: new Date().toISOString(),
      ttlMs: 2000,
    };
    await kv.put(lastKey).value(JSON.stringify(ghost));
    const r = await audit(prefix);
    expect(r.code).toBe(1);
    const lines = r.stdout.split('\n').filter((l) => l.startsWith('VIOLATION'));
    expect(lines).toEqual([
      expect.stringMatching(
        new RegExp(
          `^VIOLATION last-ms: etcd: slot 1/19: last-ms ${ghost.ms} \\(lease 4242\\) is above ${released.ms}, what the last tenure allowed: first `,
        ),
      ),
    ]);
  });
});
