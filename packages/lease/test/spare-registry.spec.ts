import { createServer, type Server, type Socket } from 'node:net';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, freePort, startEtcd } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { leaseKeys } from '../src/records.js';
import { uniquePrefix } from '../src/recording-target.test-helper.js';
import {
  SpareCodeError,
  adoptSpareCode,
  beginReclaim,
  exportHandover,
  lendSpareCode,
  readSpareCode,
  spareKeys,
  type Handover,
} from '../src/spare-codes.js';
import {
  SpareRegistryCallError,
  casRegistryCode,
  parseRegistryRecord,
  readRegistryCode,
  registryKeys,
  type RegistryIo,
} from '../src/spare-registry.js';
import { RegistryRefusedError, initRegistry } from '../src/registry-identity.js';

// docs/design.md §7: one registry for the spare codes. Three real etcd servers: the deployment's
// spare-code registry, region 2's and region 3's (each bound to its code as idgen region init does); a fourth is the
// new region's (bound to 5). Before the registry, a code could be lent once per etcd: to region 2 in region 2's etcd
// and to region 3 in region 3's, and both regions' borrowers minted under it.
jest.setTimeout(120_000);

let registryEtcd: EtcdServer;
let etcdTwo: EtcdServer;
let etcdThree: EtcdServer;
let etcdNew: EtcdServer;
let kvRegistry: Etcd3;
let kvTwo: Etcd3;
let kvThree: Etcd3;
let kvNew: Etcd3;

beforeAll(async () => {
  [registryEtcd, etcdTwo, etcdThree, etcdNew] = await Promise.all([startEtcd(), startEtcd(), startEtcd(), startEtcd()]);
  kvRegistry = new Etcd3({ hosts: [registryEtcd.clientUrl] });
  kvTwo = new Etcd3({ hosts: [etcdTwo.clientUrl] });
  kvThree = new Etcd3({ hosts: [etcdThree.clientUrl] });
  kvNew = new Etcd3({ hosts: [etcdNew.clientUrl] });
});

afterAll(async () => {
  for (const kv of [kvRegistry, kvTwo, kvThree, kvNew]) kv?.close();
  await cleanupAll();
});

const TIMEOUT_MS = 2000;
/** The deployment's loan term here: eight of the borrowers' 2 s TTL (four is the shortest they may borrow under, §7). */
const LOAN_TERM_MS = 16_000;

/** A deployment under one prefix: each region's etcd bound to its code, one registry. */
async function deployment(name: string) {
  const prefix = uniquePrefix(name);
  await Promise.all([bindRegion(etcdTwo, 2, prefix), bindRegion(etcdThree, 3, prefix), bindRegion(etcdNew, 5, prefix)]);
  const registry: RegistryIo = { client: kvRegistry, prefix, timeoutMs: TIMEOUT_MS, name: registryEtcd.clientUrl };
  await initRegistry(registry, { loanTermMs: LOAN_TERM_MS }); // idgen spare init, once for the deployment
  const at = (client: Etcd3, reg: RegistryIo = registry) => ({
    client,
    prefix,
    timeoutMs: TIMEOUT_MS,
    layout: DEFAULT_LAYOUT,
    registry: reg,
  });
  return { prefix, registry, two: at(kvTwo), three: at(kvThree), fresh: at(kvNew), at };
}

const errorOf = async (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

const localRecord = async (client: Etcd3, prefix: string, code = 5) =>
  client.get(spareKeys.code(prefix, code)).string();

/** Lends 5 to region 2, reclaims it (with one unclean last-ms record under it) and exports the handover. */
async function reclaimedFromTwo(d: Awaited<ReturnType<typeof deployment>>): Promise<Handover> {
  await lendSpareCode(d.two, 5, 2);
  const record = { ms: Date.now(), released: false, nodeId: 'borrower', at: 't', ttlMs: 2000 };
  await kvTwo.put(leaseKeys.lastMs(d.prefix, 5, 3)).value(JSON.stringify(record));
  await beginReclaim(d.two, 5);
  return exportHandover({ ...d.two, ttlMs: 2000, clockBoundMs: 10 }, 5);
}

/** A TCP port that accepts connections and never answers (a stalled registry). */
async function blackHole(): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => void sockets.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

describe('the spare-code registry', () => {
  it('1. the double loan: lent to 2 through region 2’s etcd, a loan to 3 through region 3’s is refused', async () => {
    const d = await deployment('double-loan');
    expect((await lendSpareCode(d.two, 5, 2)).changed).toBe(true);
    const err = await errorOf(lendSpareCode(d.three, 5, 3));
    expect(err).toBeInstanceOf(SpareCodeError);
    expect((err as Error).message).toMatch(
      /^spare code 5 is lent to region 2 \(.*\/spare-registry\/5 in the spare-code registry, since \S+\): not lent to region 3/,
    );
    // Region 3's etcd got nothing: its borrowers never see a loan.
    expect(await localRecord(kvThree, d.prefix)).toBeNull();
    // The registry and region 2's mirror agree, and the mirror names the registry revision it follows.
    const reg = await readRegistryCode(d.registry, 5);
    expect(reg?.record).toMatchObject({ code: 5, state: 'lent', lentTo: 2 });
    expect((await readSpareCode(d.two, 5))?.record).toMatchObject({
      state: 'lent',
      lentTo: 2,
      registryRevision: reg?.modRevision,
    });
    // The same loan again: idempotent.
    expect((await lendSpareCode(d.two, 5, 2)).changed).toBe(false);
  });

  it('2. a registry that is down, or never answers: lend, reclaim and adopt reject within the timeout, and write nothing', async () => {
    const d = await deployment('unreachable');
    const closedPort = await freePort();
    const hole = await blackHole();
    await bindRegion(etcdNew, 6, `${d.prefix}-6`);
    try {
      for (const url of [`http://127.0.0.1:${closedPort}`, hole.url]) {
        const client = new Etcd3({ hosts: [url] });
        try {
          const dead: RegistryIo = { client, prefix: d.prefix, timeoutMs: TIMEOUT_MS, name: url };
          const timed = async (p: Promise<unknown>): Promise<unknown> => {
            const start = Date.now();
            const e = await errorOf(p);
            expect(Date.now() - start).toBeLessThan(TIMEOUT_MS + 1500);
            expect(e).toBeInstanceOf(SpareRegistryCallError);
            expect((e as Error).message).toContain(`the spare-code registry (${url})`);
            return e;
          };
          // lend: nothing in region 2's etcd.
          await timed(lendSpareCode(d.at(kvTwo, dead), 6, 2));
          expect(await localRecord(kvTwo, d.prefix, 6)).toBeNull();
          // reclaim of a loan made with the registry up: the mirror stays lent (borrowers carry on, nothing half done).
          const lent = (await lendSpareCode(d.two, 7, 2)).record;
          await timed(beginReclaim(d.at(kvTwo, dead), 7));
          expect((await readSpareCode(d.two, 7))?.record).toEqual(lent);
          // adopt: no last-ms, no adopted record in the new region's etcd.
          const handover: Handover = {
            format: 'idgen-spare-handover/1',
            code: 6,
            lentTo: 2,
            prefix: d.prefix,
            reclaimedAt: 't',
            layout: DEFAULT_LAYOUT.toRecord(),
            ttlMs: 2000,
            clockBoundMs: 10,
            workers: [{ worker: 1, lastMs: 100, source: { ms: 90, released: true, nodeId: 'n', at: 't' } }],
          };
          await timed(
            adoptSpareCode({ ...d.at(kvNew, { ...dead, prefix: d.prefix }), prefix: `${d.prefix}-6` }, handover),
          );
          expect(await kvNew.getAll().prefix(`${d.prefix}-6/spare-codes/`).keys()).toEqual([]);
          expect(await kvNew.getAll().prefix(`${d.prefix}-6/regions/`).keys()).toEqual([]);
          // Back to a clean slate for the next registry address.
          await kvTwo.delete().key(spareKeys.code(d.prefix, 7));
          await kvRegistry.delete().key(registryKeys.code(d.prefix, 7));
        } finally {
          client.close();
        }
      }
    } finally {
      await hole.close();
    }
  });

  it('3. interrupted half way (registry written, mirror not): the same step again completes it; another is refused', async () => {
    const d = await deployment('interrupted');
    // What an interrupted `lend 5 --to-region 2` left: the registry's record, and no mirror in region 2's etcd.
    await casRegistryCode(d.registry, undefined, { code: 5, state: 'lent', lentTo: 2, at: 't' });
    expect(await localRecord(kvTwo, d.prefix)).toBeNull();
    // Another loan is still refused, and writes nothing.
    await expect(lendSpareCode(d.three, 5, 3)).rejects.toThrow(
      /spare code 5 is lent to region 2 .*not lent to region 3/,
    );
    expect(await localRecord(kvThree, d.prefix)).toBeNull();
    // The same lend again writes the mirror, with the registry's revision.
    const again = await lendSpareCode(d.two, 5, 2);
    const reg = await readRegistryCode(d.registry, 5);
    expect(again).toMatchObject({
      changed: true,
      record: { state: 'lent', lentTo: 2, registryRevision: reg?.modRevision },
    });

    // An interrupted reclaim: the registry says reclaiming, the mirror still lent. Running it again finishes it.
    await casRegistryCode(d.registry, reg, { code: 5, state: 'reclaiming', lentTo: 2, at: 't' });
    expect((await readSpareCode(d.two, 5))?.record.state).toBe('lent');
    const reclaiming = await beginReclaim(d.two, 5);
    const regNow = await readRegistryCode(d.registry, 5);
    expect(reclaiming).toMatchObject({ state: 'reclaiming', registryRevision: regNow?.modRevision });
    // Still refused to anyone else meanwhile.
    await expect(lendSpareCode(d.three, 5, 3)).rejects.toThrow(/being reclaimed from region 2/);

    // An interrupted export: the mirror says reclaimed, the registry still reclaiming. Running it again finishes it.
    const handover = await exportHandover({ ...d.two, ttlMs: 2000, clockBoundMs: 10 }, 5);
    const done = await readRegistryCode(d.registry, 5);
    expect(done?.record).toMatchObject({ state: 'reclaimed', handover: { lentTo: 2, workers: [], maxLastMs: -1 } });
    expect(done?.record.trail.map((t) => t.state)).toEqual(['lent', 'reclaiming', 'reclaimed']);
    // And again: the same handover, nothing changes in the registry.
    expect(await exportHandover({ ...d.two, ttlMs: 2000, clockBoundMs: 10 }, 5)).toMatchObject({
      reclaimedAt: handover.reclaimedAt,
      workers: [],
    });
    expect((await readRegistryCode(d.registry, 5))?.modRevision).toBe(done?.modRevision);
  });

  it('4. adopt: refused unless the registry says reclaimed with this handover; a second adopter is refused', async () => {
    const d = await deployment('adopt');
    const handover = await reclaimedFromTwo(d);
    expect(handover.workers).toHaveLength(1);
    // A code the registry holds as lent (never reclaimed) or free: no adoption.
    await lendSpareCode(d.two, 6, 2);
    await bindRegion(etcdNew, 6, `${d.prefix}-6`);
    const new6 = { ...d.fresh, prefix: `${d.prefix}-6` };
    await expect(adoptSpareCode(new6, { ...handover, code: 6 })).rejects.toThrow(
      /^spare code 6 is lent to region 2 .*only a reclaimed code may be adopted/,
    );
    await bindRegion(etcdNew, 7, `${d.prefix}-7`);
    await expect(adoptSpareCode({ ...d.fresh, prefix: `${d.prefix}-7` }, { ...handover, code: 7 })).rejects.toThrow(
      /spare code 7 is free in the spare-code registry/,
    );
    // A handover file that is not the registry's (a floor lowered by hand): refused.
    const lowered = { ...handover, workers: handover.workers.map((w) => ({ ...w, lastMs: w.lastMs - 5000 })) };
    await expect(adoptSpareCode(d.fresh, lowered)).rejects.toThrow(
      /the handover file is not the one the registry recorded/,
    );
    for (const p of [`${d.prefix}-6`, `${d.prefix}-7`, d.prefix])
      expect(await kvNew.getAll().prefix(`${p}/regions/`).keys()).toEqual([]);

    // The new region adopts it: the registry decides first, then its etcd gets the floors and the adopted record.
    const adopted = await adoptSpareCode(d.fresh, handover);
    expect(adopted).toMatchObject({ changed: true, written: 1, record: { state: 'adopted' } });
    const reg = await readRegistryCode(d.registry, 5);
    const clusterId = (await kvNew.get('x').exec()).header.cluster_id;
    expect(reg?.record).toMatchObject({ state: 'adopted', lentTo: 2, adoptedBy: { clusterId, prefix: d.prefix } });
    expect((await readSpareCode(d.fresh, 5))?.record.registryRevision).toBe(reg?.modRevision);
    // Again, by the same etcd: nothing changes.
    expect((await adoptSpareCode(d.fresh, handover)).changed).toBe(false);
    // A second region on code 5 (another etcd bound to 5): refused by the registry, nothing written there.
    const other = `${d.prefix}-other`;
    await bindRegion(etcdThree, 5, other);
    const second = await errorOf(adoptSpareCode({ ...d.three, prefix: other }, handover));
    expect((second as Error).message).toMatch(
      /^spare code 5 is adopted by the etcd of cluster \d+ .*a code is adopted once/,
    );
    expect(await kvThree.getAll().prefix(`${other}/regions/`).keys()).toEqual([]);
    expect(await localRecord(kvThree, other)).toBeNull();
  });

  it('5. a lend after the adoption is refused, through any region’s etcd', async () => {
    const d = await deployment('after-adoption');
    const handover = await reclaimedFromTwo(d);
    await adoptSpareCode(d.fresh, handover);
    await expect(lendSpareCode(d.three, 5, 3)).rejects.toThrow(/^spare code 5 is adopted by the etcd of cluster/);
    expect(await localRecord(kvThree, d.prefix)).toBeNull();
    // Region 2's etcd refuses on its own (reclaimed here), the registry too.
    await expect(lendSpareCode(d.two, 5, 2)).rejects.toThrow(/already recorded here as reclaimed/);
    await kvTwo.delete().key(spareKeys.code(d.prefix, 5)); // a record lost (restore): the registry still says no
    await expect(lendSpareCode(d.two, 5, 2)).rejects.toThrow(/^spare code 5 is adopted by/);
    expect(await localRecord(kvTwo, d.prefix)).toBeNull();
  });

  it('6. a second registry: a region whose mirrors follow one registry refuses a step decided in another, and writes nothing', async () => {
    const d = await deployment('two-registries');
    expect((await lendSpareCode(d.two, 5, 2)).changed).toBe(true);
    expect((await readSpareCode(d.two, 5))?.record.registry).toEqual({
      clusterId: (await readRegistryCode(d.registry, 5))?.registry.clusterId,
      prefix: d.prefix,
    });
    // An operator names another etcd as the registry (region 3's): it has no record of code 6 or of 5.
    const other: RegistryIo = { client: kvThree, prefix: d.prefix, timeoutMs: TIMEOUT_MS, name: etcdThree.clientUrl };
    // Never initialised: refused as not a deployment's registry at all.
    await expect(lendSpareCode(d.at(kvTwo, other), 6, 2)).rejects.toThrow(
      /has no deployment ID .*run "idgen spare init"/,
    );
    // Initialised on its own (another deployment ID): refused, region 2 follows the first one.
    await initRegistry(other, { loanTermMs: LOAN_TERM_MS });
    const lend = await errorOf(lendSpareCode(d.at(kvTwo, other), 6, 2));
    expect(lend).toBeInstanceOf(RegistryRefusedError);
    expect((lend as Error).message).toMatch(
      /follows the spare-code registry of cluster \d+, prefix .*, not this one \(cluster \d+, prefix .*\): a deployment has one registry/,
    );
    expect(await localRecord(kvTwo, d.prefix, 6)).toBeNull();
    // A reclaim decided in the other registry is refused the same way (it has no record of the loan at all).
    await expect(beginReclaim(d.at(kvTwo, other), 5)).rejects.toThrow(/no record of code 5|follows the spare-code/);
    expect((await readSpareCode(d.two, 5))?.record.state).toBe('lent');
    // Another prefix in the same registry etcd is another registry too.
    const moved: RegistryIo = { ...d.registry, prefix: `${d.prefix}-b` };
    await initRegistry(moved, { loanTermMs: LOAN_TERM_MS });
    await expect(lendSpareCode(d.at(kvTwo, moved), 6, 2)).rejects.toThrow(/follows the spare-code registry/);
    expect(await localRecord(kvTwo, d.prefix, 6)).toBeNull();
  });

  it('registry records: garbage is refused naming the key and the field', () => {
    const key = '/p/spare-registry/5';
    expect(parseRegistryRecord(key, '{"code":5,"state":"lent","lentTo":2,"at":"t"}')).toMatchObject({
      state: 'lent',
      lentTo: 2,
      trail: [],
    });
    expect(() => parseRegistryRecord(key, '{"code":6,"state":"lent","lentTo":2}')).toThrow(/field code/);
    expect(() => parseRegistryRecord(key, '{"code":5,"state":"reclaimed","lentTo":2}')).toThrow(/field handover/);
    expect(() =>
      parseRegistryRecord(
        key,
        '{"code":5,"state":"adopted","lentTo":2,"handover":{"lentTo":2,"maxLastMs":1,"workers":[]}}',
      ),
    ).toThrow(/field adoptedBy/);
  });
});
