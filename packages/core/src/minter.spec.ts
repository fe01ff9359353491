import fc from 'fast-check';
import { DEFAULT_EPOCH_MS, DEFAULT_LAYOUT, createLayout, createMinter, isMintVerdict } from './index.js';
import type { MintVerdict, MintedBlock } from './index.js';

const T0 = DEFAULT_EPOCH_MS + 24831000123; // the seed's example millisecond

function expectId(r: bigint | MintVerdict): bigint {
  if (isMintVerdict(r)) throw new Error(`expected an ID, got ${JSON.stringify(r)}`);
  return r;
}
function expectBlock(r: MintedBlock | MintVerdict): MintedBlock {
  if (isMintVerdict(r)) throw new Error(`expected a block, got ${JSON.stringify(r)}`);
  return r;
}

describe('Minter, one ID at a time', () => {
  it('mints the seed example: region 2, worker 17, sequence counts up within a millisecond', () => {
    const m = createMinter({ region: 2, worker: 17 });
    const ids = Array.from({ length: 6 }, () => expectId(m.mintOne(T0)));
    expect(ids[5]).toBe(104148763141017605n);
    expect(DEFAULT_LAYOUT.decompose(ids[0] as bigint)).toEqual({
      timestampMs: 24831000123,
      region: 2,
      worker: 17,
      sequence: 0,
    });
  });

  it('restarts the sequence at 0 in a new millisecond', () => {
    const m = createMinter({ region: 2, worker: 17 });
    expectId(m.mintOne(T0));
    expectId(m.mintOne(T0));
    expect(expectId(m.mintOne(T0 + 1))).toBe(104148763145211904n);
  });

  it('says the sequence is exhausted after 4,096 IDs and to retry in the next millisecond', () => {
    const m = createMinter({ region: 2, worker: 17 });
    for (let i = 0; i < 4096; i++) expectId(m.mintOne(T0));
    expect(m.mintOne(T0)).toEqual({ kind: 'sequence-exhausted', lastMs: T0, retryAtMs: T0 + 1 });
    expect(m.mintOne(T0)).toEqual({ kind: 'sequence-exhausted', lastMs: T0, retryAtMs: T0 + 1 });
    expect(DEFAULT_LAYOUT.decompose(expectId(m.mintOne(T0 + 1))).sequence).toBe(0);
  });

  it('reports a clock that went back, by how much, and mints nothing', () => {
    const m = createMinter({ region: 0, worker: 0 });
    const before = expectId(m.mintOne(T0));
    expect(m.mintOne(T0 - 7)).toEqual({ kind: 'clock-behind', lastMs: T0, nowMs: T0 - 7, behindMs: 7 });
    expect(m.snapshot()).toMatchObject({ lastMs: T0, sequence: 0 });
    expect(expectId(m.mintOne(T0))).toBe(before + 1n);
  });

  it('never mints at or below the floor', () => {
    const m = createMinter({ region: 1, worker: 3, floorMs: T0 });
    expect(m.mintOne(T0 - 5)).toEqual({ kind: 'below-floor', floorMs: T0, nowMs: T0 - 5, retryAtMs: T0 + 1 });
    expect(m.mintOne(T0)).toEqual({ kind: 'below-floor', floorMs: T0, nowMs: T0, retryAtMs: T0 + 1 });
    expect(DEFAULT_LAYOUT.unixMsOf(expectId(m.mintOne(T0 + 1)))).toBe(T0 + 1);
  });

  it('raises the floor but never lowers it', () => {
    const m = createMinter({ region: 1, worker: 3 });
    m.raiseFloor(T0 + 10);
    m.raiseFloor(T0);
    expect(m.floorMs).toBe(T0 + 10);
    expect(m.mintOne(T0 + 5)).toMatchObject({ kind: 'below-floor', retryAtMs: T0 + 11 });
    expect(() => m.raiseFloor(Number.NaN)).toThrow(/floorMs must be a safe integer/);
  });

  it('closes the current millisecond when the floor is raised onto it', () => {
    const m = createMinter({ region: 1, worker: 3 });
    expectId(m.mintOne(T0));
    m.raiseFloor(T0);
    expect(m.mintOne(T0)).toMatchObject({ kind: 'sequence-exhausted', retryAtMs: T0 + 1 });
    expect(m.mintBlock(T0, 5)).toMatchObject({ kind: 'sequence-exhausted' });
    expect(DEFAULT_LAYOUT.unixMsOf(expectId(m.mintOne(T0 + 1)))).toBe(T0 + 1);
  });

  it('refuses a clock outside the layout lifetime', () => {
    const m = createMinter({ region: 0, worker: 0 });
    expect(m.mintOne(DEFAULT_EPOCH_MS - 1)).toMatchObject({ kind: 'clock-out-of-range' });
    expect(m.mintOne(DEFAULT_EPOCH_MS + 2 ** 41)).toMatchObject({ kind: 'clock-out-of-range' });
    expect(DEFAULT_LAYOUT.decompose(expectId(m.mintOne(DEFAULT_EPOCH_MS + 2 ** 41 - 1))).timestampMs).toBe(2 ** 41 - 1);
  });

  it("never mints in the epoch's own millisecond, so 0 is never an ID", () => {
    const m = createMinter({ region: 0, worker: 0, floorMs: -5 });
    expect(m.mintOne(DEFAULT_EPOCH_MS)).toMatchObject({ kind: 'below-floor', retryAtMs: DEFAULT_EPOCH_MS + 1 });
    expect(DEFAULT_LAYOUT.decompose(expectId(m.mintOne(DEFAULT_EPOCH_MS + 1)))).toEqual({
      timestampMs: 1,
      region: 0,
      worker: 0,
      sequence: 0,
    });
  });

  it('throws on a reading that is not an integer, a programming error', () => {
    const m = createMinter({ region: 0, worker: 0 });
    expect(() => m.mintOne(T0 + 0.5)).toThrow(/nowMs must be an integer/);
    expect(() => m.mintOne(Number.NaN)).toThrow(/nowMs must be an integer/);
  });

  it('refuses a region or worker out of range', () => {
    expect(() => createMinter({ region: 8, worker: 0 })).toThrow(/region must be an integer from 0 to 7/);
    expect(() => createMinter({ region: 0, worker: -1 })).toThrow(/worker must be an integer from 0 to 127/);
  });
});

describe('Minter, blocks', () => {
  it('returns consecutive IDs as one block', () => {
    const m = createMinter({ region: 2, worker: 17 });
    const b = expectBlock(m.mintBlock(T0, 100));
    expect(b).toEqual({
      first: DEFAULT_LAYOUT.compose({ timestampMs: 24831000123, region: 2, worker: 17, sequence: 0 }),
      count: 100,
      unixMs: T0,
    });
    expect(expectId(m.mintOne(T0))).toBe(b.first + 100n);
  });

  it('gives what the millisecond has left; the rest comes in the next one', () => {
    const m = createMinter({ region: 2, worker: 17 });
    expectBlock(m.mintBlock(T0, 4000));
    const rest = expectBlock(m.mintBlock(T0, 500));
    expect(rest.count).toBe(96);
    expect(m.mintBlock(T0, 1)).toMatchObject({ kind: 'sequence-exhausted', retryAtMs: T0 + 1 });
    const next = expectBlock(m.mintBlock(T0 + 1, 404));
    expect(next.count).toBe(404);
    expect(next.first > rest.first + 95n).toBe(true);
  });

  it('takes a whole millisecond in one block', () => {
    const m = createMinter({ region: 0, worker: 0 });
    expect(expectBlock(m.mintBlock(T0, 4096)).count).toBe(4096);
    expect(m.mintOne(T0)).toMatchObject({ kind: 'sequence-exhausted' });
  });

  it.each([[0], [4097], [-1], [1.5], [Number.NaN]])('refuses count %p naming the range', (count) => {
    const m = createMinter({ region: 0, worker: 0 });
    expect(() => m.mintBlock(T0, count)).toThrow(/count must be an integer from 1 to 4096/);
  });

  it('honours the sequence size of a custom layout', () => {
    const layout = createLayout({ timestampBits: 41, regionBits: 3, workerBits: 9, sequenceBits: 10 });
    const m = createMinter({ layout, region: 0, worker: 511 });
    expect(expectBlock(m.mintBlock(T0, 1024)).count).toBe(1024);
    expect(() => m.mintBlock(T0 + 1, 1025)).toThrow(/from 1 to 1024/);
  });
});

describe('Minter properties', () => {
  /** A clock step: forward a little, stall, forward a lot, or back by any amount. */
  const step = fc.oneof(
    fc.constant(0),
    fc.integer({ min: 1, max: 3 }),
    fc.integer({ min: 4, max: 5000 }),
    fc.integer({ min: -20, max: -1 }),
    fc.integer({ min: -100_000, max: -21 }),
  );
  const action = fc.record({ step, count: fc.integer({ min: 1, max: 4096 }), single: fc.boolean() });

  it('mints strictly increasing, unique IDs for any sequence of clock readings', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 7 }),
        fc.integer({ min: 0, max: 127 }),
        fc.integer({ min: 0, max: 1000 }),
        fc.array(action, { minLength: 1, maxLength: 300 }),
        (region, worker, floorOffset, actions) => {
          const floorMs = T0 + floorOffset;
          const m = createMinter({ region, worker, floorMs });
          let now = T0;
          let last = -1n;
          let minted = 0;
          for (const a of actions) {
            now += a.step;
            const r = a.single ? m.mintOne(now) : m.mintBlock(now, a.count);
            if (isMintVerdict(r)) {
              // A verdict must be truthful about the state it refused in.
              if (r.kind === 'clock-behind') expect(now).toBeLessThan(m.lastMs);
              if (r.kind === 'below-floor') expect(now).toBeLessThanOrEqual(floorMs);
              if (r.kind === 'sequence-exhausted') expect(now).toBe(m.lastMs);
              continue;
            }
            const first = typeof r === 'bigint' ? r : r.first;
            const count = typeof r === 'bigint' ? 1 : r.count;
            expect(first > last).toBe(true);
            const f = DEFAULT_LAYOUT.decompose(first);
            expect(f.region).toBe(region);
            expect(f.worker).toBe(worker);
            expect(f.timestampMs + DEFAULT_EPOCH_MS).toBe(now);
            expect(now).toBeGreaterThan(floorMs);
            expect(f.sequence + count - 1).toBeLessThanOrEqual(4095);
            last = first + BigInt(count) - 1n;
            minted += count;
          }
          return minted >= 0;
        },
      ),
      { numRuns: 500 },
    );
  });

  it('never repeats an ID across a fleet of workers sharing one millisecond stream', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -3, max: 2 }), { minLength: 1, maxLength: 200 }), (steps) => {
        const seen = new Set<bigint>();
        const minters = [0, 1, 2].map((worker) => createMinter({ region: 4, worker }));
        let now = T0;
        for (const s of steps) {
          now += s;
          for (const m of minters) {
            const r = m.mintBlock(now, 1500);
            if (isMintVerdict(r)) continue;
            for (let i = 0n; i < BigInt(r.count); i += 500n) {
              const id = r.first + i;
              expect(seen.has(id)).toBe(false);
              seen.add(id);
            }
          }
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe('Minter: any input, never a foreign or zero ID (issue 12)', () => {
  /** Any number a caller could pass as a clock reading, including the sentinels a minter keeps internally. */
  const anyMs = fc.oneof(
    fc.constantFrom(
      -1,
      0,
      1,
      DEFAULT_EPOCH_MS - 1,
      DEFAULT_EPOCH_MS,
      T0,
      Number.MAX_SAFE_INTEGER,
      -Number.MAX_SAFE_INTEGER,
    ),
    fc.integer({ min: -10, max: 10 }),
    fc.integer({ min: DEFAULT_EPOCH_MS - 5, max: DEFAULT_EPOCH_MS + 5 }),
    fc.integer({ min: T0 - 50, max: T0 + 50 }),
    fc.maxSafeInteger(),
  );
  const call = fc.record({ nowMs: anyMs, count: fc.integer({ min: 1, max: 4096 }), single: fc.boolean() });

  it('returns only IDs of its own region and worker, never 0, whatever it is called with', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 7 }),
        fc.integer({ min: 0, max: 127 }),
        fc.option(fc.integer({ min: -1, max: T0 + 10 }), { nil: undefined }),
        fc.array(call, { minLength: 1, maxLength: 50 }),
        (region, worker, floorMs, calls) => {
          const m =
            floorMs === undefined ? createMinter({ region, worker }) : createMinter({ region, worker, floorMs });
          for (const c of calls) {
            let r: bigint | MintedBlock | MintVerdict;
            try {
              r = c.single ? m.mintOne(c.nowMs) : m.mintBlock(c.nowMs, c.count);
            } catch (e) {
              expect(e).toBeInstanceOf(RangeError); // a non-integer reading: refused loudly, nothing minted
              continue;
            }
            if (isMintVerdict(r)) continue;
            const first = typeof r === 'bigint' ? r : r.first;
            const count = typeof r === 'bigint' ? 1 : r.count;
            for (const id of [first, first + BigInt(count) - 1n]) {
              expect(id).toBeGreaterThan(0n);
              const f = DEFAULT_LAYOUT.decompose(id);
              expect([f.region, f.worker]).toEqual([region, worker]);
            }
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('refuses the first call at -1, the reading a fresh minter used to take for its current millisecond', () => {
    const m = createMinter({ region: 2, worker: 17 });
    expect(isMintVerdict(m.mintOne(-1))).toBe(true);
    expect(isMintVerdict(m.mintBlock(-1, 3))).toBe(true);
    expect(m.lastMs).toBe(-1);
    expect(m.snapshot()).toMatchObject({ lastMs: -1, sequence: -1 });
  });
});
