import { bindRegion, cleanupAll, startEtcd } from '@idgen/testing';
import type { EtcdServer } from '@idgen/testing';
import type { EtcdLeaseOptions } from '../src/config.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { LeaseMetrics } from '../src/metrics.js';
import { createRecordingMeter, RecordingTarget, SlotBook, uniquePrefix } from '../src/recording-target.test-helper.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(120_000);

let etcd: EtcdServer;
const leases: WorkerLease[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
});

afterAll(async () => {
  etcd?.resume();
  await Promise.all(leases.map((l) => l.release()));
  await cleanupAll();
});

// TTL 10 s: only the paused etcd may fence the old holder. With a TTL of 3 s, a holder whose keep-alives failed
// for 2 s on a loaded machine fenced on its own before the pause (a second lost event, a fence before SIGSTOP).
const TTL_MS = 10_000;
const MARGIN_MS = 1000;

function options(prefix: string, nodeId: string): EtcdLeaseOptions {
  return {
    endpoints: [etcd.clientUrl],
    prefix,
    region: 4,
    workers: '7-7',
    nodeId,
    ttlSeconds: TTL_MS / 1000,
    keepAliveIntervalMs: 1000,
    keepAliveTimeoutMs: 900,
    fenceMarginMs: MARGIN_MS,
    requestTimeoutMs: 2000,
    backoff: { initialMs: 50, maxMs: 300 },
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('fence before expiry (etcd paused with SIGSTOP)', () => {
  it('fences before etcd could expire the lease; after SIGCONT the old holder never mints in a slot another holds', async () => {
    const prefix = uniquePrefix('fence');
    await bindRegion(etcd, 4, prefix, { ttlCeilingSeconds: TTL_MS / 1000 });
    const book = new SlotBook();
    const a = new RecordingTarget('old', book);
    const recorded = createRecordingMeter();
    const la = createEtcdLease({ ...options(prefix, 'old-holder'), meter: recorded.meter }, a);
    leases.push(la);
    await la.start();
    // the old holder mints all the time it may (the guard would stop at the deadline: canMint checks it)
    const minting = setInterval(() => a.mint(), 2);
    await a.waitFor((e) => e.kind === 'extend', 30_000, 'first keep-alive');
    await sleep(700);

    const pausedAt = performance.now();
    etcd.pause();
    const fence = await a.waitFor((e) => e.kind === 'unassign', 60_000, 'fence');
    const lastAck = a
      .of('extend')
      .filter((e) => e.mono < fence.mono)
      .at(-1);
    expect(lastAck?.deadline).toBeDefined();
    // the deadline is (send time of the last acknowledged keep-alive) + TTL − margin
    const lastAckSentMono = (lastAck?.deadline ?? 0) - (TTL_MS - MARGIN_MS);
    const expiryEarliest = lastAckSentMono + TTL_MS;
    const gap = expiryEarliest - fence.mono;
    expect(fence.reason).toBe('lease');
    expect(fence.message).toMatch(/before etcd could expire/);
    expect(gap).toBeGreaterThan(0);
    expect(fence.mono).toBeGreaterThan(pausedAt);
    const mintedBeforeFence = a.lastMinted;
    expect(recorded.counts.get(`${LeaseMetrics.churn}{event=lost}`)).toBe(1);
    expect(recorded.counts.get(LeaseMetrics.keepAliveFailures)).toBeGreaterThan(0);
    expect(mintedBeforeFence).toBeGreaterThan(0);

    // keep etcd stopped well past the TTL; a second claimer starts meanwhile and keeps trying
    await sleep(Math.max(0, pausedAt + TTL_MS + 1500 - performance.now()));
    const b = new RecordingTarget('new', book);
    const lb = createEtcdLease(options(prefix, 'new-holder'), b);
    leases.push(lb);
    let bStarted = false;
    const bLoop = (async () => {
      while (!bStarted) {
        try {
          await lb.start();
          bStarted = true;
        } catch {
          await sleep(100);
        }
      }
    })();
    await sleep(500);
    const resumedAt = performance.now();
    etcd.resume();

    // someone holds the slot again (either the old holder re-claiming or the new one)
    const reassigned = (t: RecordingTarget): boolean => t.of('assign').some((e) => e.mono > fence.mono);
    const deadline = performance.now() + 30_000;
    while (!reassigned(a) && !reassigned(b) && performance.now() < deadline) await sleep(20);
    const holder = reassigned(b) ? b : a;
    expect(reassigned(holder)).toBe(true);
    await sleep(3000);
    clearInterval(minting);
    expect(recorded.counts.get(`${LeaseMetrics.churn}{event=acquired}`)).toBe(holder === a ? 2 : 1);
    const reassign = holder.of('assign').filter((e) => e.mono > fence.mono)[0];
    // the new holder's floor is above every millisecond the old holder minted in
    expect(reassign?.assignment?.floorMs).toBeGreaterThan(mintedBeforeFence);
    expect(book.violations).toEqual([]);
    // never both assigned at once
    expect(a.canMint() && b.canMint()).toBe(false);
    console.log(
      `fence-to-expiry gap ${gap.toFixed(1)} ms (margin ${MARGIN_MS} ms); fenced ${(fence.mono - pausedAt).toFixed(0)} ms after ` +
        `SIGSTOP; slot re-held by the ${holder.name} holder ${((reassign?.mono ?? 0) - resumedAt).toFixed(0)} ms after SIGCONT`,
    );
    bStarted = true;
    await bLoop;
  });
});
