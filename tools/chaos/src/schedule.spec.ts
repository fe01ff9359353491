import {
  FAULT_KINDS,
  FORWARD_OFFSETS_SECONDS,
  FENCE_MARGIN_MS,
  FULL_ROUND_SECONDS,
  NETNS_FAULT_KINDS,
  OPT_IN_FAULT_KINDS,
  createRandom,
  createSchedule,
  formatFault,
  keepAliveOf,
  parseFaultKinds,
} from './schedule.js';

const TTL = 3000;

describe('createSchedule', () => {
  it('gives the same schedule for the same seed, and a different one for another seed', () => {
    const a = createSchedule({ durationMs: 60_000, seed: 42, leaseTtlMs: TTL });
    const b = createSchedule({ durationMs: 60_000, seed: 42, leaseTtlMs: TTL });
    const c = createSchedule({ durationMs: 60_000, seed: 43, leaseTtlMs: TTL });
    expect(b).toEqual(a);
    expect(c.faults.map((f) => f.kind)).not.toEqual(a.faults.map((f) => f.kind));
  });

  it.each([1, 2, 3, 7, 42, 1234, 2 ** 31 - 1])(
    'fits every fault kind into a run of FULL_ROUND_SECONDS, what CI runs (seed %i)',
    (seed) => {
      const s = createSchedule({ durationMs: FULL_ROUND_SECONDS * 1000, seed, leaseTtlMs: TTL });
      expect(s.missing).toEqual([]);
      expect(new Set(s.faults.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
      const last = s.faults[s.faults.length - 1];
      expect(last).toBeDefined();
      expect((last?.atMs ?? 0) + (last?.windowMs ?? 0)).toBeLessThanOrEqual(FULL_ROUND_SECONDS * 1000);
    },
  );

  it('schedules netns-partition only with --netns (netns: true), never in the default rounds', () => {
    for (const seed of [1, 2, 3, 99]) {
      const plain = createSchedule({ durationMs: 600_000, seed, leaseTtlMs: TTL });
      expect(plain.faults.some((f) => (NETNS_FAULT_KINDS as readonly string[]).includes(f.kind))).toBe(false);
      const netns = createSchedule({ durationMs: 600_000, seed, leaseTtlMs: TTL, netns: true });
      expect(new Set(netns.faults.map((f) => f.kind))).toEqual(new Set([...FAULT_KINDS, ...NETNS_FAULT_KINDS]));
    }
    expect(parseFaultKinds('netns-partition,partition-node')).toEqual(['netns-partition', 'partition-node']);
  });

  it('holds both forward offsets in one round: +2 s on a node alone and +8 s under a partition, swapped in the next round', () => {
    for (const seed of [1, 2, 3, 99]) {
      const s = createSchedule({ durationMs: 700_000, seed, leaseTtlMs: TTL });
      const alone = s.faults.filter((f) => f.kind === 'clock-forward').map((f) => f.clockOffsetSeconds);
      const partitioned = s.faults.filter((f) => f.kind === 'partition-clock-forward').map((f) => f.clockOffsetSeconds);
      expect(alone.slice(0, 4)).toEqual([2, 8, 2, 8]);
      expect(partitioned.slice(0, 4)).toEqual([8, 2, 8, 2]);
    }
    expect(FORWARD_OFFSETS_SECONDS).toEqual([2, 8]);
  });

  it('--faults: only the kinds asked for, every round', () => {
    const kinds = parseFaultKinds('partition-clock-forward, kill-node');
    expect(kinds).toEqual(['partition-clock-forward', 'kill-node']);
    const s = createSchedule({ durationMs: 120_000, seed: 4, leaseTtlMs: TTL, kinds });
    expect(s.faults.length).toBeGreaterThanOrEqual(4);
    expect(new Set(s.faults.map((f) => f.kind))).toEqual(new Set(kinds));
    expect(s.missing).toEqual([]);
    expect(() => parseFaultKinds('kill-node,nope')).toThrow(/unknown fault kind "nope"/);
    expect(() => parseFaultKinds(' , ')).toThrow(RangeError);
  });

  it('schedules rolling-restart only when asked for: --faults, or --previous-server (optIn); the default round stays', () => {
    const base = { durationMs: 300_000, seed: 25, leaseTtlMs: 3000 };
    expect(createSchedule(base).faults.some((f) => f.kind === 'rolling-restart')).toBe(false);
    const withIt = createSchedule({ ...base, optIn: true });
    expect(new Set(withIt.faults.map((f) => f.kind))).toEqual(new Set([...FAULT_KINDS, ...OPT_IN_FAULT_KINDS]));
    expect(parseFaultKinds('rolling-restart')).toEqual(['rolling-restart']);
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
    // A full round of the 21 kinds takes about 151 s with the 3 s TTL: 600 s hold three or more.
    for (const kind of FAULT_KINDS) expect(s.faults.filter((f) => f.kind === kind).length).toBeGreaterThanOrEqual(3);
  });

  it('sizes the faults as issue 7 asks', () => {
    const s = createSchedule({ durationMs: 600_000, seed: 11, leaseTtlMs: TTL });
    for (const f of s.faults) {
      if (f.kind === 'pause-node') expect(f.effectMs).toBeGreaterThan(TTL); // longer than the TTL: the spare takes over
      if (f.kind === 'etcd-pause-short') expect(f.effectMs).toBeLessThan(TTL - 1000 - 1000); // inside the fence window
      if (f.kind === 'etcd-pause-long') expect(f.effectMs).toBeGreaterThan(TTL);
      if (f.kind === 'clock-jump-small') {
        expect(f.clockOffsetSeconds).toBeLessThan(0);
        expect(f.clockOffsetSeconds).toBeGreaterThanOrEqual(-0.01); // ≤ 10 ms: waited out (docs/design.md §4)
        expect(formatFault(f)).toMatch(/offset -0\.00[5-9]s$/);
      }
      if (f.kind === 'clock-jump-large') expect(f.clockOffsetSeconds).toBeLessThanOrEqual(-2);
      if (f.kind === 'partition-node') expect(f.effectMs).toBeGreaterThan(TTL); // cut longer than the TTL: the spare takes over
      // Down longer than a node may go without a keep-alive before it fences (TTL − margin): one member must not matter.
      if (f.kind === 'etcd-member-down') expect(f.effectMs).toBeGreaterThan(TTL - FENCE_MARGIN_MS);
      if (f.kind === 'wrong-region-node') expect(f.effectMs).toBe(0); // nothing to undo: the node is refused at its start
      if (f.kind === 'double-loan') expect(f.effectMs).toBe(0); // two CLI lends and a reclaim, on etcds of its own
      // The restore within a TTL, then room for every slot to serve again after idgen region restored.
      if (f.kind === 'etcd-snapshot-restore') expect(f.windowMs).toBeGreaterThanOrEqual(f.effectMs + 5 * TTL);
      if (f.kind === 'clock-forward') {
        expect([2, 8]).toContain(f.clockOffsetSeconds);
        expect(f.effectMs).toBeGreaterThan(2 * keepAliveOf(TTL).intervalMs); // ahead across keep-alives: last-ms is written from the jumped clock
        expect(f.windowMs).toBeGreaterThanOrEqual(f.effectMs + (f.clockOffsetSeconds ?? 0) * 1000); // the fence after the return fits
      }
      if (f.kind === 'partition-clock-forward') {
        expect([2, 8]).toContain(f.clockOffsetSeconds);
        // Long enough for the spare to take over and for true time to pass what the holder minted ahead.
        expect(f.effectMs).toBeGreaterThanOrEqual(Math.max(TTL, (f.clockOffsetSeconds ?? 0) * 1000 + TTL));
      }
      const clocked = ['clock-jump-small', 'clock-jump-large', 'clock-forward', 'partition-clock-forward'];
      if (!clocked.includes(f.kind)) expect(f.clockOffsetSeconds).toBeUndefined();
      // A keep-alive and its last-ms refresh are two round trips: 4 one-way delays (6 with a reconnect).
      const { timeoutMs } = keepAliveOf(TTL);
      if (f.kind === 'etcd-slow-short') expect(6 * (f.latencyMs ?? Infinity)).toBeLessThan(timeoutMs);
      if (f.kind === 'etcd-slow-long') {
        expect(f.latencyMs ?? 0).toBeGreaterThan(timeoutMs); // one way is already too late
        expect(f.effectMs).toBeGreaterThan(TTL);
      }
      if (f.kind !== 'etcd-slow-short' && f.kind !== 'etcd-slow-long') expect(f.latencyMs).toBeUndefined();
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
    const s = createSchedule({ durationMs: FULL_ROUND_SECONDS * 1000, seed: 3, leaseTtlMs: TTL });
    const clock = s.faults.find((f) => f.kind === 'clock-jump-large');
    expect(clock).toBeDefined();
    if (clock !== undefined) expect(formatFault(clock)).toMatch(/clock-jump-large .* offset -\d+s$/);
    const forward = s.faults.find((f) => f.kind === 'partition-clock-forward');
    if (forward !== undefined) expect(formatFault(forward)).toMatch(/partition-clock-forward .* offset \+8s$/);
    const slow = s.faults.find((f) => f.kind === 'etcd-slow-long');
    if (slow !== undefined) expect(formatFault(slow)).toMatch(/etcd-slow-long .* latency \d+ms each way$/);
  });
});

describe('keepAliveOf', () => {
  it('follows the server: every TTL/3, at most 2 s, and 3/4 of that for a keep-alive round', () => {
    expect(keepAliveOf(3000)).toEqual({ intervalMs: 1000, timeoutMs: 750 });
    expect(keepAliveOf(6000)).toEqual({ intervalMs: 2000, timeoutMs: 1500 });
    expect(keepAliveOf(60_000)).toEqual({ intervalMs: 2000, timeoutMs: 1500 });
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
