import { DEFAULT_LAYOUT, type MintedBlock } from '@idgen/core';
import { MintAbandonedError, createGuardedMinter, createMintScheduler } from './index.js';
import { createTestClock } from './testing.js';

const T0 = 1_728_898_200_123;

/** A guard on a test clock, a scheduler whose "next millisecond" is a step the test takes by hand. */
function setup() {
  const clock = createTestClock(T0, 1_000);
  const guard = createGuardedMinter({ region: 2, clock, checkIntervalMs: 0 });
  guard.assign({
    region: 2,
    worker: 5,
    floorMs: T0 - 1,
    deadlineMonoMs: clock.monoMs() + 600_000,
    ceilingMs: T0 + 600_000,
  });
  const timers: (() => void)[] = [];
  const scheduler = createMintScheduler(guard, { schedule: (fn) => void timers.push(fn) });
  /** The next millisecond arrives and the scheduler's timer fires. */
  const nextMs = async (): Promise<void> => {
    clock.advance(1);
    const fns = timers.splice(0);
    for (const fn of fns) fn();
    await Promise.resolve();
  };
  return { clock, guard, scheduler, timers, nextMs };
}

const total = (blocks: readonly MintedBlock[]): number => blocks.reduce((n, b) => n + b.count, 0);

describe('createMintScheduler (minting never busy-waits on the event loop)', () => {
  it('answers at once what the current millisecond can serve, and never waits for a millisecond inside a call', async () => {
    const { scheduler, timers, nextMs } = setup();
    const now = scheduler.mint(4000);
    expect(Array.isArray(now) && total(now)).toBe(4000);
    // 96 left in this millisecond: the rest of a NextIds(4096) is a promise, not a spin.
    const later = scheduler.mint(4096);
    expect(later).toBeInstanceOf(Promise);
    expect(timers).toHaveLength(1);
    expect(scheduler.waiting()).toBe(1);
    await nextMs();
    const blocks = await later;
    expect(blocks.map((b) => b.count)).toEqual([96, 4000]);
    expect(blocks.map((b) => DEFAULT_LAYOUT.decompose(b.first).timestampMs)).toEqual([
      T0 - DEFAULT_LAYOUT.epochMs,
      T0 + 1 - DEFAULT_LAYOUT.epochMs,
    ]);
    expect(scheduler.waiting()).toBe(0);
  });

  it("shares each millisecond between owners: one caller's burst does not starve another's NextIds(1)", async () => {
    const { scheduler, nextMs } = setup();
    const burst = { name: 'burst' };
    const probe = { name: 'probe' };
    void scheduler.mint(4096, burst); // this millisecond is spent
    const bursts = Array.from({ length: 20 }, () => scheduler.mint(4096, burst));
    const single = scheduler.mint(1, probe);
    let singleDone = false;
    void Promise.resolve(single).then(() => (singleDone = true));
    await nextMs(); // the burst's head gets this millisecond's sequence (it came first)
    await nextMs(); // the probe is served in the next one, not after 20 ms of burst
    await Promise.resolve();
    expect(singleDone).toBe(true);
    expect(total(await single)).toBe(1);
    for (let i = 0; i < 25; i++) await nextMs();
    for (const b of await Promise.all(bursts)) expect(total(b)).toBe(4096);
  });

  it('keeps each owner in order and every ID unique', async () => {
    const { scheduler, nextMs } = setup();
    const owners = [{}, {}, {}];
    const pending: { owner: number; i: number; p: MintedBlock[] | Promise<MintedBlock[]> }[] = [];
    for (let i = 0; i < 30; i++) {
      const owner = i % 3;
      pending.push({ owner, i, p: scheduler.mint(1 + ((i * 997) % 3000), owners[owner]) });
    }
    for (let i = 0; i < 40; i++) await nextMs();
    const seen = new Set<bigint>();
    const lastFirst = new Map<number, bigint>();
    for (const { owner, p } of pending) {
      const blocks = await p;
      const first = blocks[0]?.first ?? -1n;
      expect(first > (lastFirst.get(owner) ?? -1n)).toBe(true);
      lastFirst.set(owner, first);
      for (const b of blocks) {
        for (let k = 0n; k < BigInt(b.count); k += 97n) {
          expect(seen.has(b.first + k)).toBe(false);
          seen.add(b.first + k);
        }
      }
    }
  });

  it('rejects a waiting request with the fence it meets, and a new one at once', async () => {
    const { guard, scheduler, nextMs } = setup();
    void scheduler.mint(4096);
    const a = scheduler.mint(10);
    const b = scheduler.mint(10);
    const rejected = Promise.all([
      expect(a).rejects.toMatchObject({ reason: 'lease' }),
      expect(b).rejects.toMatchObject({ reason: 'lease' }),
    ]);
    guard.unassign('lease', 'lost');
    await nextMs();
    await rejected;
    expect(() => scheduler.mint(10)).toThrow('lost');
  });

  it('drops a waiting request whose caller went away, minting nothing for it', async () => {
    const { guard, scheduler, nextMs } = setup();
    void scheduler.mint(4096);
    let gone = false;
    const dropped = scheduler.mint(4096, {}, () => gone);
    const kept = scheduler.mint(10, {});
    const rejected = expect(dropped).rejects.toBeInstanceOf(MintAbandonedError);
    gone = true;
    const before = guard.counts().idsMinted;
    await nextMs();
    await rejected;
    expect(total(await kept)).toBe(10);
    expect(guard.counts().idsMinted - before).toBe(10);
  });

  it('costs an arriving request the owners it serves, not every owner waiting (a flood on 300 connections)', async () => {
    const { scheduler, nextMs } = setup();
    void scheduler.mint(4096); // this millisecond is spent
    let asked = 0;
    const alive = (): boolean => {
      asked++;
      return false;
    };
    const owners = Array.from({ length: 300 }, (_, i) => ({ i }));
    const waiting = owners.map((o) => scheduler.mint(4096, o, alive));
    asked = 0;
    // 1,000 more requests while the millisecond is still spent: each looks at the owner at the front, once.
    const more = Array.from({ length: 1_000 }, (_, i) => scheduler.mint(1, owners[i % 300], alive));
    expect(asked).toBeLessThanOrEqual(1_000);
    // And the round robin holds: the next millisecond goes to the first owner, the one after to the second.
    await nextMs();
    expect(total(await (waiting[0] as Promise<MintedBlock[]>))).toBe(4096);
    await nextMs();
    expect(total(await (waiting[1] as Promise<MintedBlock[]>))).toBe(4096);
    scheduler.close(new Error('done'));
    await Promise.allSettled([...waiting, ...more]);
  });

  it('close rejects every waiting request', async () => {
    const { scheduler } = setup();
    void scheduler.mint(4096);
    const waiting = [scheduler.mint(10, {}), scheduler.mint(10, {})];
    const rejected = Promise.all(waiting.map((p) => expect(p).rejects.toThrow('shutting down')));
    scheduler.close(new Error('shutting down'));
    await rejected;
    expect(scheduler.waiting()).toBe(0);
  });
});
