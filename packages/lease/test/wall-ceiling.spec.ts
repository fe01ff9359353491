import { performance } from 'node:perf_hooks';
import { createGuardedMinter, systemClock } from '@idgen/clock-guard';
import type { ClockSource, GuardedMinter } from '@idgen/clock-guard';
import { bindRegion, cleanupAll, createTcpProxy, startEtcd } from '@idgen/testing';
import type { EtcdServer, TcpProxy } from '@idgen/testing';
import type { EtcdLeaseOptions } from '../src/config.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { mintLoop, uniquePrefix } from '../src/recording-target.test-helper.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(120_000);

// docs/design.md §5 "wall ceiling": a holder whose wall clock runs ahead of its monotonic clock while it is
// cut off from etcd must not mint above the floor its successor computes from last-ms. Real etcd, real leases
// and guards; only the holder's clock is injected, because a frozen VM cannot be driven from a test.

let etcd: EtcdServer;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

afterAll(async () => {
  await cleanupAll();
});

/** The holder's clocks: the wall clock can be stepped, and both can freeze as a suspended VM's do. */
interface VmClock extends ClockSource {
  stepWall(ms: number): void;
  freeze(): void;
  /** Resumes both clocks: the monotonic one from where it stopped, the wall one stepped to true time. */
  resumeAtTrueTime(): void;
}

function vmClock(): VmClock {
  let wallOffset = 0;
  let monoOffset = 0;
  let frozen: { wall: number; mono: number } | undefined;
  const clock: VmClock = {
    nowMs: () => frozen?.wall ?? Date.now() + wallOffset,
    monoMs: () => frozen?.mono ?? performance.now() + monoOffset,
    stepWall(ms) {
      wallOffset += ms;
    },
    freeze() {
      frozen = { wall: clock.nowMs(), mono: clock.monoMs() };
    },
    resumeAtTrueTime() {
      if (frozen === undefined) return;
      monoOffset = frozen.mono - performance.now();
      wallOffset = 0;
      frozen = undefined;
    },
  };
  return clock;
}

/**
 * TTL 10 s, one slot, keep-alives every second. The TTL is long so that only the test's fault ends the holder's
 * lease: a holder whose keep-alives fail for a TTL − margin on a loaded machine fences on its own (`lease`) and
 * may lose the slot to the spare before the fault, and then nothing here can judge the wall ceiling. Each
 * clock fault is larger than TTL − margin, so the ceiling (last-ms + TTL − margin) is what refuses the holder.
 */
const TTL_MS = 10_000;
const MARGIN_MS = 1000;

function leaseOptions(
  prefix: string,
  endpoint: string,
  clock: ClockSource,
  waitForFreeSlot: boolean,
): EtcdLeaseOptions {
  return {
    endpoints: [endpoint],
    prefix,
    region: 2,
    workers: '9-9',
    ttlSeconds: TTL_MS / 1000,
    keepAliveIntervalMs: 1000,
    keepAliveTimeoutMs: 900,
    fenceMarginMs: MARGIN_MS,
    // A claim that times out on a loaded machine is retried; the holder's first start fails fast on a full range.
    requestTimeoutMs: 2000,
    backoff: { initialMs: 50, maxMs: 200 },
    clock,
    waitForFreeSlot,
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(what: string | (() => string), cond: () => boolean, timeoutMs: number): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    await sleep(10);
  }
}

interface Party {
  guard: GuardedMinter;
  lease: WorkerLease;
  minting: ReturnType<typeof mintLoop>;
}

async function holderAndSpare(
  prefix: string,
): Promise<{ holder: Party; spare: Party; clock: VmClock; proxy: TcpProxy }> {
  await bindRegion(etcd, 2, prefix, { ttlCeilingSeconds: TTL_MS / 1000 });
  const proxy = await createTcpProxy({ target: new URL(etcd.clientUrl).host });
  cleanups.push(() => proxy.close());
  const clock = vmClock();
  const make = (endpoint: string, c: ClockSource, spare: boolean): Party => {
    const guard = createGuardedMinter({ region: 2, clock: c });
    const lease = createEtcdLease(leaseOptions(prefix, endpoint, c, spare), guard);
    const minting = mintLoop(guard);
    cleanups.push(async () => {
      minting.stop();
      await lease.release();
      guard.close();
    });
    return { guard, lease, minting };
  };
  const holder = make(`http://${proxy.address}`, clock, false);
  await holder.lease.start();
  const spare = make(etcd.clientUrl, systemClock, true);
  void spare.lease.start(); // waits for the slot
  // The holder's first minted IDs are the event waited for (not a count a quiet machine reaches in time: 5,000 timed
  // out after 30 s at load 20); a holder that cannot mint says why (its refusals and lease state).
  await until(
    () =>
      `the holder to mint (refusals ${JSON.stringify([...holder.minting.refusals])}, lease ${holder.lease.snapshot().state})`,
    () => holder.minting.ids.length > 0,
    60_000,
  );
  return { holder, spare, clock, proxy };
}

/** Lets the spare take the slot and mint until its clock passes everything the holder minted. */
async function spareMintsPast(holder: Party, spare: Party): Promise<void> {
  await spare.lease.start();
  await until(
    'the spare to mint past the holder',
    () => spare.guard.lastMintedMs() > holder.minting.maxMs() + 20,
    60_000,
  );
  holder.minting.stop();
  spare.minting.stop();
}

function common(a: readonly bigint[], b: readonly bigint[]): number {
  const seen = new Set(a);
  return b.filter((id) => seen.has(id)).length;
}

describe('wall ceiling: a holder cut off from etcd whose wall clock runs ahead', () => {
  it('(a) wall clock stepped +12 s as the holder loses etcd: refused as clock-ahead, no ID in common with the successor', async () => {
    const { holder, spare, clock, proxy } = await holderAndSpare(uniquePrefix('ceiling-step'));
    proxy.cut();
    clock.stepWall(TTL_MS + 2000); // above the ceiling (last-ms + TTL − margin) at once
    await spareMintsPast(holder, spare);
    expect(spare.minting.ids.length).toBeGreaterThan(0);
    expect(common(holder.minting.ids, spare.minting.ids)).toBe(0);
    expect(holder.minting.refusals.get('clock-ahead')).toBeGreaterThan(0);
    expect(holder.guard.counts().fences['clock-ahead']).toBeGreaterThanOrEqual(1);
    // The rule itself: nothing the holder minted reaches the successor's floor.
    expect(holder.minting.maxMs()).toBeLessThan(spare.guard.status().floorMs);
  });

  it('(b) both clocks frozen a TTL (a suspended VM), then the wall clock stepped to true time: no ID in common', async () => {
    const { holder, spare, clock, proxy } = await holderAndSpare(uniquePrefix('ceiling-freeze'));
    // The VM is suspended: nothing runs, no packet leaves, both clocks stop.
    holder.minting.pause(true);
    proxy.cut();
    clock.freeze();
    // The length of the suspension, the fault itself: a TTL takes the true time past the ceiling (last-ms + TTL − margin).
    await sleep(TTL_MS);
    // Resumed: the monotonic clock goes on from where it stopped (its deadline seems far), the wall clock is
    // stepped to true time, and the holder mints again at once, before any of its lease's timers (due during the
    // freeze) runs: on a loaded machine they otherwise ran first and gave the slot up, and the holder was refused
    // as not-assigned before it ever reached the ceiling (one fresh-clone CI run).
    clock.resumeAtTrueTime();
    holder.minting.pause(false);
    await spareMintsPast(holder, spare);
    expect(common(holder.minting.ids, spare.minting.ids)).toBe(0);
    expect(holder.minting.refusals.get('clock-ahead')).toBeGreaterThan(0);
    expect(holder.minting.maxMs()).toBeLessThan(spare.guard.status().floorMs);
  });
});
