// A borrower's etcd restored after its loan moved on (docs/design.md §7, "Registry threats"): region 2 borrows spare
// code 5; `etcdctl snapshot save` of region 2's etcd; code 5 is reclaimed and adopted by the new region; region 2's
// etcd is restored from the snapshot. Its mirror says `lent` again. A claim that trusts that copy claims code 5 beside
// the adopter; the registry, which says `adopted`, decides. Three real etcds (region 2's, the new region's, the
// registry), real leases and guards, a real snapshot and restore.
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createGuardedMinter, systemClock } from '@idgen/clock-guard';
import { bindRegion, cleanupAll, createTcpProxy, lentEarlierClock, startEtcd, tempDir } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import type { EtcdLeaseOptions } from '../src/config.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { NoFreeWorkerError } from '../src/errors.js';
import { RecordingTarget, mintLoop, uniquePrefix } from '../src/recording-target.test-helper.js';
import { markRegionRestored } from '../src/region-restore.js';
import { initRegistry } from '../src/registry-identity.js';
import {
  adoptSpareCode,
  beginReclaim,
  exportHandover,
  heldSlotsUnder,
  lendSpareCode,
  readSpareCode,
} from '../src/spare-codes.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(180_000);

const TTL_S = 3;
/**
 * The deployment's loan term here: eight TTLs (four is the shortest a borrower may borrow under, docs/design.md §7),
 * so that a loan no borrower renews yet outlasts the home node's start on a busy machine.
 */
const LOAN_TERM_MS = 8 * TTL_S * 1000;
const cleanups: (() => Promise<void> | void)[] = [];

afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await cleanupAll();
});

function leaseOptions(etcd: EtcdServer, prefix: string, extra: Partial<EtcdLeaseOptions>): EtcdLeaseOptions {
  return {
    endpoints: [etcd.clientUrl],
    prefix,
    region: 2,
    ttlSeconds: TTL_S,
    keepAliveIntervalMs: 500,
    keepAliveTimeoutMs: 400,
    fenceMarginMs: 1000,
    requestTimeoutMs: 1500,
    backoff: { initialMs: 50, maxMs: 200 },
    ...extra,
  };
}

/** Region 2's etcd and region `code`'s (bound, with the TTL ceiling) and a registry etcd, under a fresh prefix. */
async function regionTwoAnd(code: number, name: string) {
  const prefix = uniquePrefix(name);
  const [two, other, registryEtcd] = await Promise.all([startEtcd(), startEtcd(), startEtcd()]);
  await bindRegion(two, 2, prefix, { ttlCeilingSeconds: TTL_S });
  await bindRegion(other, code, prefix, { ttlCeilingSeconds: TTL_S });
  const kvTwo = new Etcd3({ hosts: [two.clientUrl] });
  const kvOther = new Etcd3({ hosts: [other.clientUrl] });
  const kvRegistry = new Etcd3({ hosts: [registryEtcd.clientUrl] });
  cleanups.push(() => {
    kvTwo.close();
    kvOther.close();
    kvRegistry.close();
  });
  return { prefix, two, other, registryEtcd, kvTwo, kvOther, kvRegistry };
}

function track(lease: WorkerLease): WorkerLease {
  cleanups.push(() => lease.release());
  return lease;
}

/**
 * Region 2 (its one home slot held), the new region bound to 5, a registry of its own; code 5 lent to region 2 and
 * region 2's etcd snapshotted while the loan stood; then reclaimed (no borrower held it) and adopted by the new region.
 */
async function deadLoan(name: string) {
  const { prefix, two, other: fresh, registryEtcd, kvTwo, kvOther: kvNew, kvRegistry } = await regionTwoAnd(5, name);
  const registry = { client: kvRegistry, prefix, timeoutMs: 5000, name: registryEtcd.clientUrl };
  await initRegistry(registry, { loanTermMs: LOAN_TERM_MS });
  const ioTwo = { client: kvTwo, prefix, timeoutMs: 5000, layout: DEFAULT_LAYOUT, registry };
  const ioNew = { ...ioTwo, client: kvNew };
  // Region 2's home slot 0 is held for the whole test by a long lease in its etcd (in the snapshot too): a borrower
  // with home range 0-0 finds it full, before and after the restore.
  const homeLease = kvTwo.lease(600, { autoKeepAlive: false });
  await homeLease.put(`${prefix}/regions/2/workers/0`).value('{"nodeId":"home","kind":"service"}');
  await lendSpareCode({ ...ioTwo, now: lentEarlierClock(LOAN_TERM_MS) }, 5, 2); // its first-claim wait over
  const dir = await tempDir('idgen-loan-snapshot');
  const snapshot = join(dir.path, 'two.db');
  await two.snapshot(snapshot);
  const registrySnapshot = join(dir.path, 'registry.db');
  await registryEtcd.snapshot(registrySnapshot);
  await beginReclaim(ioTwo, 5);
  const handover = await exportHandover({ ...ioTwo, ttlMs: TTL_S * 1000, clockBoundMs: 10 }, 5);
  await adoptSpareCode(ioNew, handover);
  const borrow = {
    workers: '0-0',
    kind: 'embedded' as const,
    borrowSpare: true,
    registry: { endpoints: [registryEtcd.clientUrl], prefix },
  };
  return { prefix, two, fresh, registryEtcd, kvTwo, ioTwo, snapshot, registrySnapshot, borrow };
}

/**
 * Starts a borrower of region 2; if it claims (the code without the registry's word), starts the adopting region's
 * node on the same worker of code 5 and counts the IDs both mint: the duplicates a dead loan costs.
 */
async function borrowAfterRestore(d: Awaited<ReturnType<typeof deadLoan>>, name: string) {
  const guard = createGuardedMinter({ region: 2, clock: systemClock });
  const lease = track(createEtcdLease(leaseOptions(d.two, d.prefix, { ...d.borrow, nodeId: name }), guard));
  cleanups.push(() => guard.close());
  const started = await lease.start().then(
    () => undefined,
    (e: unknown) => e,
  );
  if (started !== undefined) return { started, claimed: false, common: 0 };
  const worker = lease.snapshot().worker ?? -1;
  const adopterGuard = createGuardedMinter({ region: 5, clock: systemClock });
  const adopter = track(
    createEtcdLease(
      leaseOptions(d.fresh, d.prefix, { region: 5, workers: `${worker}-${worker}`, nodeId: `${name}-adopter` }),
      adopterGuard,
    ),
  );
  cleanups.push(() => adopterGuard.close());
  await adopter.start();
  const a = mintLoop(guard);
  const b = mintLoop(adopterGuard);
  const end = Date.now() + 3000;
  while (Date.now() < end && (a.ids.length < 50_000 || b.ids.length < 50_000))
    await new Promise((r) => setTimeout(r, 50));
  a.stop();
  b.stop();
  const mine = new Set(a.ids);
  const common = b.ids.filter((id) => mine.has(id)).length;
  console.log(
    `dead loan, ${name}: borrower ${a.ids.length} IDs on 5/${worker}, adopter ${b.ids.length}, ${common} equal`,
  );
  return { started, claimed: true, common };
}

describe("a borrower's etcd restored after its loan moved on", () => {
  it('same token: the restored mirror says lent, the registry says adopted: no borrower claims under code 5', async () => {
    const d = await deadLoan('loan-same-token');
    await d.two.restore(d.snapshot);
    expect((await readSpareCode(d.ioTwo, 5))?.record.state).toBe('lent'); // the dead loan, as restored
    const r = await borrowAfterRestore(d, 'borrower-same');
    expect({ claimed: r.claimed, common: r.common }).toEqual({ claimed: false, common: 0 });
    expect(r.started).toBeInstanceOf(NoFreeWorkerError);
    expect((r.started as Error).message).toMatch(/spare code 5: loan not confirmed by the registry \(.*adopted by/);
    expect(await heldSlotsUnder(d.ioTwo, 5)).toEqual([]);
  });

  it('the registry restored too, neither followed up: the two agree the loan stands, but its term ended: no claim', async () => {
    const d = await deadLoan('loan-both-rewound');
    // Both stores back to while the loan stood, and neither runbook step (spare reconcile, region restored) run.
    await d.registryEtcd.restore(d.registrySnapshot);
    await d.two.restore(d.snapshot);
    expect((await readSpareCode(d.ioTwo, 5))?.record.state).toBe('lent');
    const r = await borrowAfterRestore(d, 'borrower-both');
    // Before loan terms: claimed, and about half the IDs equal (the simulator's find: tools/sim/README.md).
    expect({ claimed: r.claimed, common: r.common }).toEqual({ claimed: false, common: 0 });
    expect(r.started).toBeInstanceOf(NoFreeWorkerError);
    expect((r.started as Error).message).toMatch(
      /spare code 5: loan not confirmed by the registry \(the loan of code 5 ended at .*not renewed/,
    );
  });

  it('new token: idgen region restored asks the registry, seals the dead loan (reclaimed), and no borrower claims under it', async () => {
    const d = await deadLoan('loan-new-token');
    await d.two.restore(d.snapshot, { clusterToken: `restored-${Date.now()}` });
    const kv = new Etcd3({ hosts: [d.two.clientUrl] });
    cleanups.push(() => kv.close());
    // The restore replaced the old cluster in place: the runbook's --old-etcd-stopped.
    const report = await markRegionRestored({ ...d.ioTwo, client: kv }, 2, {
      ttlMs: TTL_S * 1000,
      oldClusterStopped: true,
    });
    expect(report.loans).toEqual([{ code: 5, verdict: 'dropped', why: expect.stringMatching(/adopted by/) }]);
    expect((await readSpareCode({ ...d.ioTwo, client: kv }, 5))?.record.state).toBe('reclaimed');
    const r = await borrowAfterRestore(d, 'borrower-new');
    expect({ claimed: r.claimed, common: r.common }).toEqual({ claimed: false, common: 0 });
    expect(r.started).toBeInstanceOf(NoFreeWorkerError);
  });

  it('the registry unreachable: a borrower keeps the slot it holds until its term, and no new claim goes under a loan it cannot confirm', async () => {
    const prefix = uniquePrefix('loan-registry-down');
    const [two, registryEtcd] = await Promise.all([startEtcd(), startEtcd()]);
    await bindRegion(two, 2, prefix, { ttlCeilingSeconds: TTL_S });
    const kvTwo = new Etcd3({ hosts: [two.clientUrl] });
    const kvRegistry = new Etcd3({ hosts: [registryEtcd.clientUrl] });
    cleanups.push(() => {
      kvTwo.close();
      kvRegistry.close();
    });
    const registry = { client: kvRegistry, prefix, timeoutMs: 5000 };
    await initRegistry(registry, { loanTermMs: LOAN_TERM_MS });
    const ioTwo = { client: kvTwo, prefix, timeoutMs: 5000, layout: DEFAULT_LAYOUT, registry };
    await track(createEtcdLease(leaseOptions(two, prefix, { workers: '0-0' }), new RecordingTarget('home'))).start();
    await lendSpareCode({ ...ioTwo, now: lentEarlierClock(LOAN_TERM_MS) }, 5, 2); // its first-claim wait over
    const borrow = {
      workers: '0-0',
      kind: 'embedded' as const,
      borrowSpare: true,
      registry: { endpoints: [registryEtcd.clientUrl], prefix },
    };
    const held = new RecordingTarget('held');
    await track(createEtcdLease(leaseOptions(two, prefix, borrow), held)).start();
    expect(held.assignment?.region).toBe(5);
    registryEtcd.pause(); // the registry stops answering
    cleanups.push(() => registryEtcd.resume());
    const late = await track(createEtcdLease(leaseOptions(two, prefix, borrow), new RecordingTarget('late')))
      .start()
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(NoFreeWorkerError);
    expect((late as Error).message).toMatch(/spare code 5: loan not confirmed by the registry \(.*did not answer/);
    // The holder refreshed all along (its refreshes compare the mirror in its own etcd, not the registry).
    const extendsSince = held.of('extend').length;
    await held.waitFor((e) => e.kind === 'extend' && held.of('extend').length > extendsSince + 2, 10_000, 'refreshes');
    expect(held.of('unassign')).toEqual([]);
    // But never past the loan's term (docs/design.md §7, "Loan terms"): unrenewed, the slot goes back a TTL before it
    // ends, with no answer from the registry (an adopter may start once it has passed).
    const back = await held.waitFor((e) => e.kind === 'unassign', LOAN_TERM_MS + 10_000, 'the slot given back');
    expect(back.message).toMatch(/spare code 5: the loan's term ends at .*unrenewed: the borrowed slot is given back/);
  });

  it('the registry restored and the code lent again elsewhere: the holder of the loan it forgot gives its slot back', async () => {
    const r = await regionTwoAnd(3, 'loan-registry-rewound');
    const { prefix, two, registryEtcd, kvTwo, kvOther: kvThree, kvRegistry } = r;
    const registry = { client: kvRegistry, prefix, timeoutMs: 5000 };
    await initRegistry(registry, { loanTermMs: LOAN_TERM_MS });
    const dir = await tempDir('idgen-registry-snapshot');
    const snapshot = join(dir.path, 'registry.db');
    await registryEtcd.snapshot(snapshot);
    const ioTwo = { client: kvTwo, prefix, timeoutMs: 5000, layout: DEFAULT_LAYOUT, registry };
    await track(createEtcdLease(leaseOptions(two, prefix, { workers: '0-0' }), new RecordingTarget('home'))).start();
    // No deployment file: region 3's etcd never hears of the registry. Lent a term and a quarter ago (its wait over).
    await lendSpareCode({ ...ioTwo, now: lentEarlierClock(LOAN_TERM_MS) }, 5, 2);
    const held = new RecordingTarget('held');
    const borrow = {
      workers: '0-0',
      kind: 'embedded' as const,
      borrowSpare: true,
      registry: { endpoints: [registryEtcd.clientUrl], prefix },
    };
    await track(createEtcdLease(leaseOptions(two, prefix, borrow), held)).start();
    expect(held.assignment?.region).toBe(5);
    // The registry restored from the backup forgets the loan; an operator lends 5 to region 3 through its etcd.
    await registryEtcd.restore(snapshot);
    const kvRestored = new Etcd3({ hosts: [registryEtcd.clientUrl] });
    cleanups.push(() => kvRestored.close());
    await lendSpareCode({ ...ioTwo, client: kvThree, registry: { ...registry, client: kvRestored } }, 5, 3);
    // Region 2's holder asks the registry again while it holds: lent to region 3 now, so the slot goes back.
    const back = await held.waitFor((e) => e.kind === 'unassign', 20_000, 'the borrowed slot given back');
    expect(back.message).toMatch(/spare code 5: the loan moved on \(the registry says code 5 is lent to region 3/);
    const end = Date.now() + 10_000;
    while ((await heldSlotsUnder(ioTwo, 5)).length > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    expect(await heldSlotsUnder(ioTwo, 5)).toEqual([]);
  });

  it("the same, with the holder cut off the registry: the new loan's first claim waits until the forgotten loan's holder gave its slot back", async () => {
    // The simulator's find (tools/sim/README.md, "Found on main, closed"): the holder cannot hear that its loan moved
    // on, so it keeps its slot until its term ends; before a new loan's first claims waited a term and a quarter
    // (newLoanTimes), region 3's borrower claimed code 5 at once beside it.
    const r = await regionTwoAnd(3, 'loan-registry-forgot');
    const { prefix, two, other: three, registryEtcd, kvTwo, kvOther: kvThree, kvRegistry } = r;
    const toRegistry = await createTcpProxy({ target: new URL(registryEtcd.clientUrl).host });
    cleanups.push(() => toRegistry.close());
    const registry = { client: kvRegistry, prefix, timeoutMs: 5000 };
    await initRegistry(registry, { loanTermMs: LOAN_TERM_MS });
    const dir = await tempDir('idgen-registry-snapshot');
    const snapshot = join(dir.path, 'registry.db');
    await registryEtcd.snapshot(snapshot);
    const ioTwo = { client: kvTwo, prefix, timeoutMs: 5000, layout: DEFAULT_LAYOUT, registry };
    await track(createEtcdLease(leaseOptions(two, prefix, { workers: '0-0' }), new RecordingTarget('home'))).start();
    await lendSpareCode({ ...ioTwo, now: lentEarlierClock(LOAN_TERM_MS) }, 5, 2);
    const borrow = { workers: '0-0', kind: 'embedded' as const, borrowSpare: true };
    const held = new RecordingTarget('held');
    const registryViaProxy = { endpoints: [`http://${toRegistry.address}`], prefix };
    await track(createEtcdLease(leaseOptions(two, prefix, { ...borrow, registry: registryViaProxy }), held)).start();
    expect(held.assignment?.region).toBe(5);
    // Region 2 cut off the registry; the registry restored to before the loan; code 5 lent to region 3, with no
    // deployment file naming region 2 (nothing but the registry could say that region 2 borrows it).
    toRegistry.cut();
    await registryEtcd.restore(snapshot);
    const kvRestored = new Etcd3({ hosts: [registryEtcd.clientUrl] });
    cleanups.push(() => kvRestored.close());
    const ioThree = { ...ioTwo, client: kvThree, registry: { ...registry, client: kvRestored } };
    const lent = await lendSpareCode(ioThree, 5, 3);
    const usableFromMs = lent.usableFromMs ?? 0;
    expect(usableFromMs).toBeGreaterThan(Date.now());
    // Region 3's borrower (its home slot held) is refused until then.
    const borrowThree = { ...borrow, region: 3, registry: { endpoints: [registryEtcd.clientUrl], prefix } };
    await track(
      createEtcdLease(leaseOptions(three, prefix, { workers: '0-0', region: 3 }), new RecordingTarget('home3')),
    ).start();
    const early = await track(createEtcdLease(leaseOptions(three, prefix, borrowThree), new RecordingTarget('early')))
      .start()
      .catch((e: unknown) => e);
    expect(early).toBeInstanceOf(NoFreeWorkerError);
    expect((early as Error).message).toMatch(
      /spare code 5: loan not confirmed by the registry \(a new loan: first claims from/,
    );
    // Region 2's holder gives its slot back at its term's end, unheard by the registry, before that time.
    const back = await held.waitFor((e) => e.kind === 'unassign', LOAN_TERM_MS + 10_000, 'the slot given back');
    expect(back.message).toMatch(/spare code 5: the loan's term ends at .*unrenewed: the borrowed slot is given back/);
    expect(back.wall).toBeLessThan(usableFromMs);
    // From then on, region 3's borrowers claim under code 5, and region 2 holds nothing under it.
    await new Promise((r) => setTimeout(r, Math.max(0, usableFromMs - Date.now()) + 50));
    const late = new RecordingTarget('late');
    await track(createEtcdLease(leaseOptions(three, prefix, borrowThree), late)).start();
    expect(late.assignment?.region).toBe(5);
    expect(await heldSlotsUnder(ioTwo, 5)).toEqual([]);
  });
});
