import { cleanupAll, startEtcd } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import type { Lease } from 'etcd3';
import { leaseKeys, parseLastMsRecord } from '../src/records.js';
import type { LastMsRecord } from '../src/records.js';
import { uniquePrefix } from '../src/recording-target.test-helper.js';
import { claimSlot, isOwnLateWrite, writeLastMsRecord } from '../src/slot-transactions.js';
import { openTenure, updateTenureRecord } from '../src/tenure-ledger.js';
import type { Tenure, TenureRecord } from '../src/tenure-ledger.js';

jest.setTimeout(60_000);

// The transactions the lease's safety rests on, against a real etcd (docs/design.md §5). The lease itself
// is tested end to end elsewhere; here each rule is driven to the exact interleaving that broke it.

let etcd: EtcdServer;
let client: Etcd3;
const leases: Lease[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
  client = new Etcd3({ hosts: [etcd.clientUrl] });
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.revoke().catch(() => undefined)));
  client?.close();
  await cleanupAll();
});

async function grant(): Promise<{ lease: Lease; id: string }> {
  const lease = client.lease(30, { autoKeepAlive: false });
  leases.push(lease);
  return { lease, id: await lease.grant() };
}

function keysOf(prefix: string, worker: number) {
  return { worker: leaseKeys.worker(prefix, 2, worker), lastMs: leaseKeys.lastMs(prefix, 2, worker) };
}

const record = (ms: number, leaseId: string, released = false): LastMsRecord => ({
  ms,
  released,
  nodeId: 'node-a',
  leaseId,
  at: new Date(ms).toISOString(),
  ttlMs: 6000,
});

async function lastMsNow(key: string): Promise<LastMsRecord> {
  const raw = await client.get(key).string();
  if (raw === null) throw new Error(`${key} is absent`);
  return parseLastMsRecord(key, raw);
}

describe('claimSlot', () => {
  it('adopts a worker key its own lease already holds (a claim whose answer was lost and was sent again)', async () => {
    const keys = keysOf(uniquePrefix('claim'), 7);
    const { lease, id } = await grant();
    const first = await claimSlot(client, lease, id, keys, '{"nodeId":"node-a"}', 2000);
    expect(first.kind).toBe('claimed');
    // The same transaction again, as a retry after a lost answer sends it: the slot is still ours.
    const again = await claimSlot(client, lease, id, keys, '{"nodeId":"node-a"}', 2000);
    expect(again.kind).toBe('adopted');
    const other = await grant();
    expect(await claimSlot(client, other.lease, other.id, keys, '{"nodeId":"node-b"}', 2000)).toEqual({
      kind: 'held',
      holder: '{"nodeId":"node-a"}',
    });
  });

  it('reads last-ms with its revision when claiming and when adopting', async () => {
    const keys = keysOf(uniquePrefix('claim-read'), 3);
    await client.put(keys.lastMs).value(JSON.stringify(record(1_800_000_000_000, 'old')));
    const { lease, id } = await grant();
    const claimed = await claimSlot(client, lease, id, keys, '{}', 2000);
    const adopted = await claimSlot(client, lease, id, keys, '{}', 2000);
    for (const o of [claimed, adopted]) {
      if (o.kind === 'held' || o.kind === 'withdrawn') throw new Error('expected the slot');
      expect(parseLastMsRecord(keys.lastMs, o.lastMs?.value ?? '').ms).toBe(1_800_000_000_000);
      expect(Number(o.lastMs?.modRevision)).toBeGreaterThan(0);
    }
  });
});

describe('writeLastMsRecord', () => {
  it('a write sent with an old expectation cannot land after a newer one (a refresh given up on, arriving late)', async () => {
    const keys = keysOf(uniquePrefix('order'), 1);
    const { lease, id } = await grant();
    const claim = await claimSlot(client, lease, id, keys, '{}', 2000);
    expect(claim).toMatchObject({ kind: 'claimed', lastMs: undefined });
    const w0 = await writeLastMsRecord(client, id, keys, '0', record(1_000_000, id), 2000);
    if (w0.kind !== 'written') throw new Error(`first write: ${w0.kind}`);
    // Refresh A (ms 1,002,000) is sent expecting w0's revision and held up on the way; the node gives up on it
    // and sends refresh B (ms 1,004,000), with the same expectation, which lands.
    const b = await writeLastMsRecord(client, id, keys, w0.revision, record(1_004_000, id), 2000);
    expect(b.kind).toBe('written');
    // A arrives now: refused, and last-ms keeps B's millisecond.
    const late = await writeLastMsRecord(client, id, keys, w0.revision, record(1_002_000, id), 2000);
    expect(late.kind).toBe('moved');
    expect((await lastMsNow(keys.lastMs)).ms).toBe(1_004_000);
  });

  it('a late refresh cannot land after the final released record', async () => {
    const keys = keysOf(uniquePrefix('release'), 2);
    const { lease, id } = await grant();
    await claimSlot(client, lease, id, keys, '{}', 2000);
    const w0 = await writeLastMsRecord(client, id, keys, '0', record(2_000_000, id), 2000);
    if (w0.kind !== 'written') throw new Error(w0.kind);
    const final = await writeLastMsRecord(client, id, keys, w0.revision, record(2_001_000, id, true), 2000);
    expect(final.kind).toBe('written');
    expect((await writeLastMsRecord(client, id, keys, w0.revision, record(2_000_500, id), 2000)).kind).toBe('moved');
    expect(await lastMsNow(keys.lastMs)).toMatchObject({ ms: 2_001_000, released: true });
  });

  it('writes nothing once the worker key is gone or bound to another lease', async () => {
    const keys = keysOf(uniquePrefix('not-held'), 4);
    const { lease, id } = await grant();
    await claimSlot(client, lease, id, keys, '{}', 2000);
    await client.delete().key(keys.worker);
    expect(await writeLastMsRecord(client, id, keys, '0', record(3_000_000, id), 2000)).toEqual({ kind: 'not-held' });
    expect(await client.get(keys.lastMs).string()).toBeNull();
  });

  it('tells a late write of its own from a record someone else put there', async () => {
    const key = '/k';
    const own = { nodeId: 'node-a', leaseId: '42', highestSentMs: 5_000 };
    const found = (r: Partial<LastMsRecord>) => ({
      value: JSON.stringify({ ...record(4_000, '42'), ...r }),
      lease: '0',
      modRevision: '9',
    });
    expect(isOwnLateWrite(key, found({}), own)?.ms).toBe(4_000);
    expect(isOwnLateWrite(key, found({ ms: 9_000 }), own)).toBeUndefined(); // higher than anything we sent
    expect(isOwnLateWrite(key, found({ leaseId: '43' }), own)).toBeUndefined(); // another session of the node
    expect(isOwnLateWrite(key, found({ nodeId: 'node-b' }), own)).toBeUndefined();
    expect(
      isOwnLateWrite(key, { value: '{"ms":0,"released":true}', lease: '0', modRevision: '9' }, own),
    ).toBeUndefined();
    expect(isOwnLateWrite(key, undefined, own)).toBeUndefined();
  });
});

describe('updateTenureRecord with a joined last-ms write (the claim, docs/design.md §5)', () => {
  const tenure = (leaseId: string): Tenure => ({
    code: 2,
    worker: 9,
    kind: 'service',
    nodeId: 'node-a',
    leaseId,
    firstMs: 1000,
    lastMs: null,
    end: 'open',
    startedAt: new Date(0).toISOString(),
  });
  const setup = async (name: string) => {
    const prefix = uniquePrefix(name);
    const keys = keysOf(prefix, 9);
    const tenures = leaseKeys.tenures(prefix, 2, 9);
    const { lease, id } = await grant();
    const claimed = await claimSlot(client, lease, id, keys, '{"nodeId":"node-a"}', 2000);
    expect(claimed.kind).toBe('claimed');
    const joined = { key: keys.lastMs, expectedRevision: '0', value: JSON.stringify(record(999, id)) };
    const open = (r: TenureRecord): TenureRecord | undefined =>
      openTenure(r, tenure(id), undefined, 6000, new Date(0).toISOString());
    return { keys: { worker: keys.worker, tenures }, lastMs: keys.lastMs, id, joined, open };
  };
  const read = async (key: string) => (await client.get(key).exec()).kvs[0];

  it('writes last-ms and the open tenure at one revision, both or neither', async () => {
    const { keys, lastMs, id, joined, open } = await setup('joined');
    const outcome = await updateTenureRecord(client, id, keys, open, 2000, { joined });
    expect(outcome.kind).toBe('written');
    const revision = outcome.kind === 'written' ? outcome.revision : undefined;
    expect((await read(lastMs))?.mod_revision).toBe(revision);
    expect((await read(keys.tenures))?.mod_revision).toBe(revision);
    expect((await lastMsNow(lastMs)).ms).toBe(999);
  });

  it('a last-ms not at the revision read: nothing written, the tenure neither', async () => {
    const { keys, lastMs, id, joined, open } = await setup('joined-moved');
    await client.put(lastMs).value(JSON.stringify(record(5, '1')));
    const outcome = await updateTenureRecord(client, id, keys, open, 2000, { joined });
    expect(outcome).toMatchObject({ kind: 'joined-moved', found: { modRevision: (await read(lastMs))?.mod_revision } });
    expect(await read(keys.tenures)).toBeUndefined();
    expect((await lastMsNow(lastMs)).ms).toBe(5);
  });

  it('a worker key no longer held: nothing written, last-ms neither', async () => {
    const { keys, lastMs, id, joined, open } = await setup('joined-lost');
    await client.delete().key(keys.worker);
    expect(await updateTenureRecord(client, id, keys, open, 2000, { joined })).toEqual({ kind: 'not-held' });
    expect(await read(keys.tenures)).toBeUndefined();
    expect(await read(lastMs)).toBeUndefined();
  });

  it("a borrowed code's spare record changed (a reclaim): joined-withdrawn, nothing written", async () => {
    const { keys, lastMs, id, joined, open } = await setup('joined-withdrawn');
    const spare = `${keys.worker}-spare`;
    await client.put(spare).value('lent');
    const guard = { key: spare, modRevision: (await read(spare))?.mod_revision ?? '' };
    await client.put(spare).value('reclaiming');
    const outcome = await updateTenureRecord(client, id, keys, open, 2000, { joined: { ...joined, guard } });
    expect(outcome).toEqual({ kind: 'joined-withdrawn' });
    expect(await read(keys.tenures)).toBeUndefined();
    expect(await read(lastMs)).toBeUndefined();
  });
});
