import { FAULT_KINDS, createRandom, createSchedule, formatFault } from './schedule.js';

const TTL = 3000;

describe('createSchedule', () => {
  it('gives the same schedule for the same seed, and a different one for another seed', () => {
    const a = createSchedule({ durationMs: 60_000, seed: 42, leaseTtlMs: TTL });
    const b = createSchedule({ durationMs: 60_000, seed: 42, leaseTtlMs: TTL });
    const c = createSchedule({ durationMs: 60_000, seed: 43, leaseTtlMs: TTL });
    expect(b).toEqual(a);
    expect(c.faults.map((f) => f.kind)).not.toEqual(a.faults.map((f) => f.kind));
  });

  it.each([1, 2, 3, 7, 42, 1234, 2 ** 31 - 1])('fits every fault kind into a 60 s run (seed %i)', (seed) => {
    const s = createSchedule({ durationMs: 60_000, seed, leaseTtlMs: TTL });
    expect(s.missing).toEqual([]);
    expect(new Set(s.faults.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
    const last = s.faults[s.faults.length - 1];
    expect(last).toBeDefined();
    expect((last?.atMs ?? 0) + (last?.windowMs ?? 0)).toBeLessThanOrEqual(60_000);
  });

  it('runs faults one at a time: each effect ends inside its own window, windows do not overlap', () => {
    const s = createSchedule({ durationMs: 600_000, seed: 9, leaseTtlMs: TTL });
    for (let i = 0; i < s.faults.length; i++) {
      const f = s.faults[i];
      if (f === undefined) continue;
      expect(f.effectMs).toBeLessThan(f.windowMs);
      const next = s.faults[i + 1];
      if (next !== undefined) expect(next.atMs).toBeGreaterThanOrEqual(f.atMs + f.windowMs);
      expect(f.index).toBe(i + 1);
    }
  });

  it('repeats the kinds in longer runs', () => {
    const s = createSchedule({ durationMs: 600_000, seed: 5, leaseTtlMs: TTL });
    for (const kind of FAULT_KINDS) expect(s.faults.filter((f) => f.kind === kind).length).toBeGreaterThanOrEqual(9);
  });

  it('sizes the faults as issue 7 asks', () => {
    const s = createSchedule({ durationMs: 600_000, seed: 11, leaseTtlMs: TTL });
    for (const f of s.faults) {
      if (f.kind === 'pause-node') expect(f.effectMs).toBeGreaterThan(TTL); // longer than the TTL: the spare takes over
      if (f.kind === 'etcd-pause-short') expect(f.effectMs).toBeLessThan(TTL - 1000 - 1000); // inside the fence window
      if (f.kind === 'etcd-pause-long') expect(f.effectMs).toBeGreaterThan(TTL);
      if (f.kind === 'clock-jump-small') {
        expect(f.clockOffsetSeconds).toBeLessThan(0);
        expect(f.clockOffsetSeconds).toBeGreaterThanOrEqual(-0.01); // ≤ 10 ms: waited out (DESIGN §4)
      }
      if (f.kind === 'clock-jump-large') expect(f.clockOffsetSeconds).toBeLessThanOrEqual(-2);
      if (f.kind !== 'clock-jump-small' && f.kind !== 'clock-jump-large') expect(f.clockOffsetSeconds).toBeUndefined();
      expect(f.pick).toBeGreaterThanOrEqual(0);
      expect(f.pick).toBeLessThan(1);
    }
  });

  it('says which kinds do not fit a run too short for them', () => {
    const s = createSchedule({ durationMs: 20_000, seed: 1, leaseTtlMs: TTL });
    expect(s.faults.length).toBeLessThan(FAULT_KINDS.length);
    expect(s.missing.length).toBe(FAULT_KINDS.length - new Set(s.faults.map((f) => f.kind)).size);
  });

  it('prints one line per fault', () => {
    const s = createSchedule({ durationMs: 60_000, seed: 3, leaseTtlMs: TTL });
    const clock = s.faults.find((f) => f.kind === 'clock-jump-large');
    expect(clock).toBeDefined();
    if (clock !== undefined) expect(formatFault(clock)).toMatch(/clock-jump-large .* offset -\d+s$/);
  });
});

describe('createRandom', () => {
  it('is deterministic and stays in [0, 1)', () => {
    const a = createRandom(7);
    const b = createRandom(7);
    const xs = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(xs);
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...xs)).toBeLessThan(1);
  });
});
