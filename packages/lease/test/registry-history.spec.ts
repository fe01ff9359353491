// The registry's identity and history (docs/design.md §7, "Registry threats"). Four real etcds: the deployment's
// registry, region 2's, region 3's, and a second registry an operator names under pressure; a real
// `etcdctl snapshot save` and `snapshot restore` of the registry.
// - A registry restored from a backup: a lend of code 5 to region 3 finds no record there. On the code before, it was
//   accepted beside region 2's loan, and both regions' borrowers minted under code 5.
// - Two registries during a split: region 3's operator names another one; region 3's etcd had no mirror, so it accepted.
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, cleanupAll, startEtcd, tempDir } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { uniquePrefix } from '../src/recording-target.test-helper.js';
import {
  RegistryRefusedError,
  initRegistry,
  noteRegistrySeenInAll,
  readRegistrySeen,
} from '../src/registry-identity.js';
import type { RegionEtcd } from '../src/registry-identity.js';
import { reconcileRegistry } from '../src/registry-reconcile.js';
import { lendSpareCode, readSpareCode, spareKeys } from '../src/spare-codes.js';
import { readRegistryCode } from '../src/spare-registry.js';
import type { RegistryIo } from '../src/spare-registry.js';

jest.setTimeout(120_000);

let registryEtcd: EtcdServer;
let otherRegistryEtcd: EtcdServer;
let etcdTwo: EtcdServer;
let etcdThree: EtcdServer;
const clients: Etcd3[] = [];

beforeAll(async () => {
  [registryEtcd, otherRegistryEtcd, etcdTwo, etcdThree] = await Promise.all([
    startEtcd(),
    startEtcd(),
    startEtcd(),
    startEtcd(),
  ]);
});

afterAll(async () => {
  for (const c of clients) c.close();
  await cleanupAll();
});

function client(etcd: EtcdServer): Etcd3 {
  const c = new Etcd3({ hosts: [etcd.clientUrl] });
  clients.push(c);
  return c;
}

const TIMEOUT_MS = 5000;

/** A deployment under a fresh prefix: regions 2 and 3 bound, the registry initialised (idgen spare init). */
async function deployment(name: string) {
  const prefix = uniquePrefix(name);
  await Promise.all([bindRegion(etcdTwo, 2, prefix), bindRegion(etcdThree, 3, prefix)]);
  const kvTwo = client(etcdTwo);
  const kvThree = client(etcdThree);
  const registry: RegistryIo = { client: client(registryEtcd), prefix, timeoutMs: TIMEOUT_MS, name: 'registry' };
  await initRegistry(registry);
  const region = (c: Etcd3, n: string): RegionEtcd => ({ client: c, prefix, timeoutMs: TIMEOUT_MS, name: n });
  const regions = [region(kvTwo, "region 2's etcd"), region(kvThree, "region 3's etcd")];
  // A step run with the deployment file (every region read and told the registry revision), or with none.
  const at = (c: Etcd3, reg: RegistryIo, withDeployment = true) => ({
    client: c,
    prefix,
    timeoutMs: TIMEOUT_MS,
    layout: DEFAULT_LAYOUT,
    registry: reg,
    ...(withDeployment ? { deployment: regions } : {}),
  });
  return { prefix, kvTwo, kvThree, registry, regions, at };
}

const errorOf = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('the registry restored from a backup', () => {
  it('a lend the restored registry has no record against is refused (rewound), until reconcile rebuilds it from the mirrors', async () => {
    const d = await deployment('registry-rewound');
    const dir = await tempDir('idgen-registry-snapshot');
    const snapshot = join(dir.path, 'registry.db');
    await registryEtcd.snapshot(snapshot);
    await lendSpareCode(d.at(d.kvTwo, d.registry), 5, 2);
    // Every region of the deployment remembers the registry revision the lend reached.
    const seen = await readRegistrySeen(d.regions[1] as RegionEtcd);
    expect(seen?.record.registry.deploymentId).toBeDefined();
    await registryEtcd.restore(snapshot); // same token and URL: the same cluster ID, its history back
    const restored: RegistryIo = { ...d.registry, client: client(registryEtcd) };
    expect(await readRegistryCode(restored, 5)).toBeUndefined(); // the loan is gone from the registry

    // Through region 3's etcd alone (no deployment file): it saw a later revision than the registry answers with.
    const alone = await errorOf(lendSpareCode(d.at(d.kvThree, restored, false), 5, 3));
    expect(alone).toBeInstanceOf(RegistryRefusedError);
    expect((alone as RegistryRefusedError).refusal).toBe('rewound');
    expect((alone as Error).message).toMatch(
      /^the spare-code registry answers at revision \d+, but this step's etcd saw it at revision \d+: its history went back/,
    );
    // With the deployment file: refused too (region 2's mirror follows a registry record the registry no longer has).
    const withFile = await errorOf(lendSpareCode(d.at(d.kvThree, restored), 5, 3));
    expect((withFile as RegistryRefusedError).refusal).toBe('rewound');
    // Nothing was written: neither the registry nor region 3's etcd.
    expect(await readRegistryCode(restored, 5)).toBeUndefined();
    expect(await d.kvThree.get(spareKeys.code(d.prefix, 5)).string()).toBeNull();

    // The operator reconciles from the regions' mirrors: code 5 is lent to region 2 again, and that is final.
    const report = await reconcileRegistry({ registry: restored, regions: d.regions, layout: DEFAULT_LAYOUT });
    expect(report.codes).toEqual([{ code: 5, before: 'free', after: 'lent', from: "region 2's etcd", sealed: [] }]);
    const lend3 = await errorOf(lendSpareCode(d.at(d.kvThree, restored), 5, 3));
    expect((lend3 as RegistryRefusedError).refusal).toBe('conflict');
    expect((lend3 as Error).message).toMatch(/in region 2's etcd says spare code 5 is lent \(lent to region 2\)/);
    // Without the deployment file, the registry itself now says no.
    await expect(lendSpareCode(d.at(d.kvThree, restored, false), 5, 3)).rejects.toThrow(
      /^spare code 5 is lent to region 2 .*not lent to region 3/,
    );
    expect(await d.kvThree.get(spareKeys.code(d.prefix, 5)).string()).toBeNull();
    // Region 2's loan follows the rebuilt record: the same lend again is accepted (nothing to change).
    expect((await lendSpareCode(d.at(d.kvTwo, restored), 5, 2)).changed).toBe(false);
    expect((await readSpareCode(d.at(d.kvTwo, restored), 5))?.record.registryRevision).toBe(
      (await readRegistryCode(restored, 5))?.modRevision,
    );
  });

  it('a conflicting mirror anywhere in the deployment refuses a lend before it writes', async () => {
    const d = await deployment('registry-conflict');
    await lendSpareCode(d.at(d.kvTwo, d.registry), 5, 2);
    // A mirror that says region 2 borrows code 6, with no registry record behind it (as after a restore of the
    // registry, once later writes carried its revision past what the regions saw).
    await d.kvTwo
      .put(spareKeys.code(d.prefix, 6))
      .value(JSON.stringify({ code: 6, state: 'lent', lentTo: 2, at: 't' }));
    const e = await errorOf(lendSpareCode(d.at(d.kvThree, d.registry), 6, 3));
    expect((e as RegistryRefusedError).refusal).toBe('conflict');
    expect((e as Error).message).toMatch(
      /spare-codes\/6 in region 2's etcd says spare code 6 is lent \(lent to region 2\), which contradicts this lend/,
    );
    expect(await readRegistryCode(d.registry, 6)).toBeUndefined();
  });
});

describe('reconcile', () => {
  it('refuses a registry record of another loan than the mirrors (a lend accepted behind the regions), writing nothing', async () => {
    const d = await deployment('reconcile-other-loan');
    await lendSpareCode(d.at(d.kvTwo, d.registry), 5, 2);
    const reg = await readRegistryCode(d.registry, 5);
    // The registry's record says lent to region 3 (as after a lend a registry without these checks accepted).
    await d.registry.client.put(reg?.key ?? '').value(JSON.stringify({ ...reg?.record, lentTo: 3 }));
    const e = await errorOf(reconcileRegistry({ registry: d.registry, regions: d.regions, layout: DEFAULT_LAYOUT }));
    expect((e as RegistryRefusedError).refusal).toBe('conflict');
    expect((e as Error).message).toMatch(
      /^the registry says code 5 is lent \(or was\) to region 3, the mirrors to region 2/,
    );
    expect((await readSpareCode(d.at(d.kvTwo, d.registry), 5))?.record.registryRevision).toBe(reg?.modRevision);
  });
});

describe('two registries during a split', () => {
  it("region 3's operator names another registry: refused by what region 3's etcd remembers, nothing written", async () => {
    const d = await deployment('two-registries-split');
    await lendSpareCode(d.at(d.kvTwo, d.registry), 5, 2);
    const other: RegistryIo = { client: client(otherRegistryEtcd), prefix: d.prefix, timeoutMs: TIMEOUT_MS };
    // Never initialised: not a deployment's registry.
    const uninitialised = await errorOf(lendSpareCode(d.at(d.kvThree, other, false), 5, 3));
    expect((uninitialised as RegistryRefusedError).refusal).toBe('uninitialised');
    // Initialised on the spot: another deployment ID in another cluster; region 3's etcd follows the first.
    await initRegistry(other);
    const e = await errorOf(lendSpareCode(d.at(d.kvThree, other, false), 5, 3));
    expect(e).toBeInstanceOf(RegistryRefusedError);
    expect((e as RegistryRefusedError).refusal).toBe('other-registry');
    expect((e as Error).message).toMatch(
      /^this step's etcd follows the spare-code registry of cluster \d+, prefix \S+, deployment [0-9a-f-]+, not this one/,
    );
    expect(await readRegistryCode(other, 5)).toBeUndefined();
    expect(await d.kvThree.get(spareKeys.code(d.prefix, 5)).string()).toBeNull();
  });

  it("region 3's operator runs spare init on the other registry with a file of region 3 alone: refused, region 3 still follows the first", async () => {
    // The simulator's find (tools/sim/src/regions.spec.ts, "two registries"): this init moved region 3's memory to the
    // other registry, a lend through it then went through, and region 3's borrowers naming it minted code 5 beside
    // region 2's.
    const d = await deployment('two-registries-init');
    await lendSpareCode(d.at(d.kvTwo, d.registry), 5, 2);
    const before = await readRegistrySeen(d.regions[1] as RegionEtcd);
    expect(before).toBeDefined();
    const other: RegistryIo = { client: client(otherRegistryEtcd), prefix: d.prefix, timeoutMs: TIMEOUT_MS };
    const { now } = await initRegistry(other);
    // A region with no memory yet is listed first: nothing is written to it either (every region is read first).
    const fresh = uniquePrefix('two-registries-fresh');
    const unseen: RegionEtcd = { client: d.kvTwo, prefix: fresh, timeoutMs: TIMEOUT_MS, name: 'a fresh region' };
    const e = await errorOf(noteRegistrySeenInAll([unseen, d.regions[1] as RegionEtcd], now.identity, now.revision));
    expect(e).toBeInstanceOf(RegistryRefusedError);
    expect((e as RegistryRefusedError).refusal).toBe('other-registry');
    expect((e as Error).message).toMatch(
      /^region 3's etcd follows the spare-code registry of cluster \d+, prefix \S+, deployment [0-9a-f-]+, not this one .*run "idgen spare reconcile" there/,
    );
    expect(await readRegistrySeen(unseen)).toBeUndefined();
    expect((await readRegistrySeen(d.regions[1] as RegionEtcd))?.record).toEqual(before?.record);
    // And the lend through the other registry stays refused.
    const lend = await errorOf(lendSpareCode(d.at(d.kvThree, other, false), 5, 3));
    expect((lend as RegistryRefusedError).refusal).toBe('other-registry');
  });
});
