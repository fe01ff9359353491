import { DEFAULT_LAYOUT } from '@idgen/core';
import { DEFAULT_LOAN_TERM_MS, beginReclaim, heldSlotsUnder, initRegistry, lendSpareCode } from '@idgen/lease/operator';
import {
  QUICK_LEASE_SETTINGS,
  bindRegion,
  cleanupAll,
  lentEarlierClock,
  startEtcd,
  type EtcdServer,
} from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { IdsUnavailableError, createEmbeddedIdSource, type EmbeddedIdSource } from '../src/index.js';

// borrowSpare (docs/design.md §7): an embedded source whose range is full borrows a slot under a spare code
// its region's etcd records as lent to it, mints IDs carrying that code, and gives the slot back when it is reclaimed.
jest.setTimeout(120_000);

let etcd: EtcdServer;
let kv: Etcd3;
const sources: EmbeddedIdSource[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
  kv = new Etcd3({ hosts: [etcd.clientUrl] });
});

afterAll(async () => {
  await Promise.all(sources.map((s) => s.close()));
  kv?.close();
  await cleanupAll();
});

function source(prefix: string, borrowSpare: boolean): EmbeddedIdSource {
  const s = createEmbeddedIdSource({
    etcd: { endpoints: [etcd.clientUrl], prefix },
    region: 2,
    workers: '18-18',
    borrowSpare,
    // The registry the borrower confirms its loan in: region 2's etcd, under the same prefix.
    ...(borrowSpare ? { registry: { endpoints: [etcd.clientUrl], prefix } } : {}),
    timeSource: 'none',
    ...QUICK_LEASE_SETTINGS,
    slotWaitMs: 500,
  });
  sources.push(s);
  return s;
}

it('a full range borrows under a code lent to the region: its IDs carry the code, and reclaiming takes the slot back', async () => {
  const prefix = `/idgen-embedded/borrow-${process.pid}`;
  // The deployment's spare-code registry (docs/design.md §7): here region 2's etcd, under the same prefix.
  const registry = { client: kv, prefix, timeoutMs: 2000 };
  const io = { client: kv, prefix, timeoutMs: 2000, layout: DEFAULT_LAYOUT, registry };
  await bindRegion(etcd, 2, prefix); // region 2's etcd, bound to 2 (idgen region init) before its first source
  const own = source(prefix, false);
  await own.ready();
  expect(DEFAULT_LAYOUT.decompose(own.nextIdSync()).region).toBe(2);

  await initRegistry(registry); // idgen spare init, once for the deployment
  // Lent a loan term and a quarter ago (the default term's): its first-claim wait is over (docs/design.md §7).
  await lendSpareCode({ ...io, now: lentEarlierClock(DEFAULT_LOAN_TERM_MS) }, 5, 2);
  const borrower = source(prefix, true);
  await borrower.ready();
  const id = borrower.nextIdSync();
  const fields = DEFAULT_LAYOUT.decompose(id);
  expect(fields.region).toBe(5);
  expect(fields.worker).toBe(borrower.status().worker);
  expect(await heldSlotsUnder(io, 5)).toHaveLength(1);

  await beginReclaim(io, 5);
  const start = Date.now();
  while ((await heldSlotsUnder(io, 5)).length > 0) {
    if (Date.now() - start > 10_000) throw new Error('the borrowed slot was not given back within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  // The slot is gone and the source refuses rather than mint under the code or invent anything.
  expect(() => borrower.nextIdSync()).toThrow(IdsUnavailableError);
});
