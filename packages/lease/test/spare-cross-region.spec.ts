import { performance } from 'node:perf_hooks';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createGuardedMinter, systemClock } from '@idgen/clock-guard';
import type { ClockSource, GuardedMinter } from '@idgen/clock-guard';
import { bindRegion, cleanupAll, createTcpProxy, lentEarlierClock, startEtcd } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import type { EtcdLeaseOptions } from '../src/config.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { RecordingTarget, mintLoop, uniquePrefix } from '../src/recording-target.test-helper.js';
import { adoptSpareCode, beginReclaim, exportHandover, heldSlotsUnder, lendSpareCode } from '../src/spare-codes.js';
import type { WorkerLease } from '../src/types.js';
import { initRegistry } from '../src/registry-identity.js';

jest.setTimeout(180_000);

// docs/design.md §7: a spare code lent to region 2 (its own etcd), borrowed by region 2's embedded callers,
// reclaimed, handed over and adopted by a new region with its own etcd, each step decided in the spare-code registry
// first. Two real etcd servers, real leases and
// guards; only the clock of the borrower that runs ahead is injected.

let regionTwo: EtcdServer;
let newRegion: EtcdServer;
let kvTwo: Etcd3;
let kvNew: Etcd3;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  regionTwo = await startEtcd();
  newRegion = await startEtcd();
  kvTwo = new Etcd3({ hosts: [regionTwo.clientUrl] });
  kvNew = new Etcd3({ hosts: [newRegion.clientUrl] });
});

afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  kvTwo?.close();
  kvNew?.close();
  await cleanupAll();
});

/**
 * TTL 10 s: only the test's faults end a lease. With a TTL of 2 s, a party whose keep-alives failed for 1.5 s on a
 * loaded machine fenced on its own and claimed again, most likely another worker of code 5 than the one the test
 * follows (or the home slot, before the borrowers started).
 */
const TTL_MS = 10_000;
const MARGIN_MS = 1000;
/** The deployment's loan term here: four TTLs, the shortest a borrower may borrow under (docs/design.md §7). */
const LOAN_TERM_MS = 4 * TTL_MS;
/** How far the second borrower's wall clock runs ahead of true time (more than a TTL: its last-ms is in the future). */
const AHEAD_MS = 12_000;

function leaseOptions(prefix: string, endpoint: string, extra: Partial<EtcdLeaseOptions>): EtcdLeaseOptions {
  return {
    endpoints: [endpoint],
    prefix,
    region: 2,
    ttlSeconds: TTL_MS / 1000,
    keepAliveIntervalMs: 1000,
    keepAliveTimeoutMs: 900,
    fenceMarginMs: MARGIN_MS,
    // The claims, and the final released last-ms of a slot given back, get 2 s on a loaded machine.
    requestTimeoutMs: 2000,
    backoff: { initialMs: 50, maxMs: 200 },
    ...extra,
  };
}

/** A wall clock `offset` ms from true time that can be stepped; the monotonic clock is the real one. */
function offsetClock(offset: number): ClockSource & { step(ms: number): void } {
  let wall = offset;
  return { nowMs: () => Date.now() + wall, monoMs: () => performance.now(), step: (ms) => void (wall += ms) };
}

interface Party {
  name: string;
  guard: GuardedMinter;
  lease: WorkerLease;
  minting: ReturnType<typeof mintLoop>;
}

function party(name: string, region: number, options: EtcdLeaseOptions, clock: ClockSource): Party {
  const guard = createGuardedMinter({ region, clock });
  const lease = createEtcdLease({ ...options, clock }, guard);
  const minting = mintLoop(guard);
  cleanups.push(async () => {
    minting.stop();
    await lease.release();
    guard.close();
  });
  return { name, guard, lease, minting };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

const fields = (id: bigint) => DEFAULT_LAYOUT.decompose(id);

describe('a spare code across two etcd clusters: lend, borrow, reclaim, adopt', () => {
  it('the new region on code 5 mints no ID a borrower minted, including a borrower whose clock ran ahead and crashed', async () => {
    const prefix = uniquePrefix('cross');
    // The deployment's spare-code registry (docs/design.md §7) is region 2's etcd, under the same prefix: every step
    // is decided there first, then mirrored into the region's own etcd.
    const registry = { client: kvTwo, prefix, timeoutMs: 2000 };
    await initRegistry(registry, { loanTermMs: LOAN_TERM_MS }); // idgen spare init, once for the deployment
    const two = { client: kvTwo, prefix, timeoutMs: 2000, layout: DEFAULT_LAYOUT, registry };
    const fresh = { client: kvNew, prefix, timeoutMs: 2000, layout: DEFAULT_LAYOUT, registry };
    // Each region's etcd is bound to its code before its first node: region 2's to 2, the new region's to 5.
    await bindRegion(regionTwo, 2, prefix, { ttlCeilingSeconds: TTL_MS / 1000 });
    await bindRegion(newRegion, 5, prefix, { ttlCeilingSeconds: TTL_MS / 1000 });

    // Region 2: its one home slot is taken; code 5 is lent to it.
    const home = createEtcdLease(
      leaseOptions(prefix, regionTwo.clientUrl, { workers: '0-0' }),
      new RecordingTarget('home'),
    );
    cleanups.push(() => home.release());
    await home.start();
    await lendSpareCode({ ...two, now: lentEarlierClock(LOAN_TERM_MS) }, 5, 2); // its first-claim wait over

    // Two borrowers: one on true time, one whose wall clock runs AHEAD_MS ahead and reaches etcd through a proxy.
    const proxy = await createTcpProxy({ target: new URL(regionTwo.clientUrl).host });
    cleanups.push(() => proxy.close());
    const borrow = {
      workers: '0-0',
      kind: 'embedded' as const,
      borrowSpare: true,
      registry: { endpoints: [regionTwo.clientUrl], prefix },
    };
    const steady = party('steady', 2, leaseOptions(prefix, regionTwo.clientUrl, borrow), systemClock);
    const aheadClock = offsetClock(AHEAD_MS);
    const ahead = party('ahead', 2, leaseOptions(prefix, `http://${proxy.address}`, borrow), aheadClock);
    await steady.lease.start();
    await ahead.lease.start();
    const borrowers = [steady, ahead];
    const borrowedWorker = new Map(borrowers.map((b) => [b.name, b.lease.snapshot().worker ?? -1]));
    expect(borrowers.map((b) => b.lease.snapshot().region)).toEqual([5, 5]);
    await until('both borrowers to mint', () => borrowers.every((b) => b.minting.ids.length > 20_000), 30_000);
    for (const b of borrowers)
      expect(fields(b.minting.ids[0] as bigint)).toMatchObject({ region: 5, worker: borrowedWorker.get(b.name) });

    // The ahead borrower crashes for etcd (cut off, never releases) and its wall clock jumps another TTL, above
    // last-ms + TTL − margin: the wall ceiling refuses it until its deadline fences it.
    const trueTimeAtCut = Date.now();
    proxy.cut();
    aheadClock.step(TTL_MS);

    // Reclaim: no new claims; the steady borrower gives its slot back at its next refresh, the ahead one expires.
    await beginReclaim(two, 5);
    await until(
      'every code-5 slot released or expired',
      async () => (await heldSlotsUnder(two, 5)).length === 0,
      60_000,
    );
    await until('the ahead borrower to be fenced', () => ahead.guard.status().state === 'fenced', 30_000);
    for (const b of borrowers) b.minting.stop();
    const handover = await exportHandover({ ...two, ttlMs: TTL_MS, clockBoundMs: 10 }, 5);
    expect(handover.workers.map((w) => w.worker).sort((a, b) => a - b)).toEqual(
      [...borrowedWorker.values()].sort((a, b) => a - b),
    );
    const byWorker = new Map(handover.workers.map((w) => [w.worker, w]));
    expect(byWorker.get(borrowedWorker.get('steady') ?? -1)?.source.released).toBe(true);
    expect(byWorker.get(borrowedWorker.get('ahead') ?? -1)?.source.released).toBe(false);

    // Adopt into the new region's etcd, then start its lease holders on code 5, one on each borrowed worker.
    await adoptSpareCode(fresh, handover);
    const successors = borrowers.map((b) => {
      const w = borrowedWorker.get(b.name) ?? -1;
      return party(
        `new-${w}`,
        5,
        leaseOptions(prefix, newRegion.clientUrl, { region: 5, workers: `${w}-${w}`, waitForFreeSlot: true }),
        systemClock,
      );
    });
    await Promise.all(successors.map((s) => s.lease.start()));
    const maxMsOf = (ids: readonly bigint[]): number =>
      ids.reduce((m, id) => Math.max(m, DEFAULT_LAYOUT.unixMsOf(id)), -1);
    await until(
      'each successor to mint past everything its borrower minted',
      () => successors.every((s, i) => s.guard.lastMintedMs() > maxMsOf((borrowers[i] as Party).minting.ids) + 20),
      90_000,
    );
    for (const s of successors) s.minting.stop();

    const minted = new Set<bigint>();
    for (const b of borrowers) for (const id of b.minting.ids) minted.add(id);
    let common = 0;
    for (const s of successors) for (const id of s.minting.ids) if (minted.has(id)) common++;
    const figures = borrowers.map((b, i) => {
      const s = successors[i] as Party;
      return {
        worker: borrowedWorker.get(b.name),
        borrower: b.name,
        borrowerIds: b.minting.ids.length,
        borrowerMaxMs: maxMsOf(b.minting.ids),
        handoverLastMs: byWorker.get(borrowedWorker.get(b.name) ?? -1)?.lastMs,
        successorFloorMs: s.guard.status().floorMs,
        successorIds: s.minting.ids.length,
        clockAheadRefusals: b.minting.refusals.get('clock-ahead') ?? 0,
      };
    });
    console.log(`cross-region spare code 5: ${JSON.stringify({ common, figures })}`);
    expect(successors.every((s) => s.minting.ids.length > 0)).toBe(true);
    expect(common).toBe(0);
    // The rule itself: every successor's floor is above anything its borrower minted.
    for (const f of figures) expect(f.borrowerMaxMs).toBeLessThan(f.successorFloorMs);
    // The ahead borrower's IDs were in the future, and its jump was refused by the wall ceiling.
    expect(figures[1]?.borrowerMaxMs).toBeGreaterThan(trueTimeAtCut + AHEAD_MS - 1000);
    expect(figures[1]?.clockAheadRefusals).toBeGreaterThan(0);
  });
});
