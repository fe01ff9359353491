import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { RangeFullError, createEmbeddedIdSource, slotBudget, type EmbeddedIdSource } from '../src/index.js';

// The slot budget (docs/design.md §3, §7) against a real etcd: 128 embedded sources in one process fill the
// embedded range, 110 slots by default, and the rest get the documented wait and error.
jest.setTimeout(300_000);

const ROOT = join(__dirname, '..', '..', '..');
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

it('the budget is derived from the configuration: 110 slots by default, 110 + 3 × 128 = 494 with the three spare codes, as the READMEs say', () => {
  expect(slotBudget()).toEqual({ home: 110, borrowed: 0, total: 110 });
  expect(slotBudget({ borrowedCodes: 3 })).toEqual({ home: 110, borrowed: 384, total: 494 });
  expect(slotBudget({ workers: '0-17' }).total).toBe(18); // the nodes' default share
  expect(slotBudget({ workers: { first: 100, last: 127 }, borrowedCodes: 1 })).toEqual({
    home: 28,
    borrowed: 128,
    total: 156,
  });
  expect(() => slotBudget({ workers: '18-128' })).toThrow(RangeError);
  for (const readme of ['docs/running-a-region.md', 'packages/embedded/README.md']) {
    const text = readFileSync(join(ROOT, readme), 'utf8');
    expect({ readme, figures: text.includes('110 + 3 × 128 = 494') && /\*\*110\*\*/.test(text) }).toEqual({
      readme,
      figures: true,
    });
  }
});

it('128 sources in one process: 110 take the embedded range 18-127, the other 18 wait slotWaitMs and are told the range is full', async () => {
  const prefix = `/idgen-capacity-${process.pid}`;
  await bindRegion(etcd, 3, prefix); // region 3's etcd, bound to 3 (idgen region init) before its first source
  // Lease fences, counted: a source whose keep-alives starve on a loaded machine loses its slot, and a waiter may
  // take it, so ready() can resolve for one more source per fence. Never more than 110 hold at once.
  const fenced: string[] = [];
  const logger = {
    info: () => undefined,
    warn: (fields: Record<string, unknown>, msg: string) => {
      if (msg === 'lease: fenced') fenced.push(JSON.stringify(fields));
    },
    error: () => undefined,
  };
  for (let i = 0; i < 128; i++) {
    sources.push(
      createEmbeddedIdSource({
        etcd: { endpoints: [etcd.clientUrl], prefix },
        region: 3,
        nodeId: `embedded-${i}`,
        timeSource: 'none',
        slotWaitMs: 5000,
        logger,
      }),
    );
  }
  const outcomes = await Promise.allSettled(sources.map((s) => s.ready()));
  const held = sources.filter((_, i) => outcomes[i]?.status === 'fulfilled');
  const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
  const budget = slotBudget();
  expect({ held: held.length + refused.length, fencedOrExact: held.length - budget.total <= fenced.length }).toEqual({
    held: 128,
    fencedOrExact: true,
  });
  if (fenced.length === 0) expect({ held: held.length, refused: refused.length }).toEqual({ held: 110, refused: 18 });
  else console.log(`capacity: ${fenced.length} lease fence(s) under load, the first: ${fenced[0]}`);
  for (const e of refused) {
    expect(e).toBeInstanceOf(RangeFullError);
    expect(e).toMatchObject({ reason: 'range-full', region: 3, range: { first: 18, last: 127 }, holders: 110 });
    expect((e as Error).message).toMatch(
      /^no free worker slot in region 3's range 18-127 \(110 slots\): 110 held by other holders, still after waiting \d+ ms \(slotWaitMs 5000\)/,
    );
  }

  // The sources holding a slot now (a fenced one re-claims, and waits while the range is full): 110, each its own.
  const holding = (): EmbeddedIdSource[] => held.filter((s) => s.status().canMint);
  const end = performance.now() + 60_000; // a hang guard, not a timing assertion
  while (holding().length < budget.total && performance.now() < end) await new Promise((r) => setTimeout(r, 100));
  const now = holding();
  const workers = now.map((s) => s.status().worker as number);
  expect({ holding: now.length, workers: new Set(workers).size }).toEqual({ holding: 110, workers: 110 });
  expect(Math.min(...workers)).toBe(18);
  expect(Math.max(...workers)).toBe(127);

  // Every holder mints, and the 110 sources' IDs never collide.
  const ids = now.flatMap((s) => s.nextIdsSync(100));
  expect(new Set(ids).size).toBe(11_000);
  expect(new Set(ids.map((id) => DEFAULT_LAYOUT.decompose(id).worker)).size).toBe(110);

  // etcd agrees: 110 worker keys, every one kind embedded, none of them in discovery.
  const records = Object.values(await kv.getAll().prefix(`${prefix}/regions/3/workers/`).strings()).map(
    (v) => JSON.parse(v) as { kind: string },
  );
  expect(records).toHaveLength(110);
  expect(new Set(records.map((r) => r.kind))).toEqual(new Set(['embedded']));
  expect(await kv.getAll().prefix(`${prefix}/regions/3/nodes/`).keys()).toEqual([]);
  console.log(
    `capacity: ${held.length} of 128 sources were ready, ${now.length} hold a slot of 18-127 now; ${refused.length} refused with range-full after slotWaitMs 5000; ${fenced.length} fence(s)`,
  );
});
