import { judgeTracking, parseChronyTracking, untilTimeSourceHealthy } from './index.js';
import { LARGE_OFFSET, LEAP_INSERT, NO_REFERENCE, SYNCED, UNSYNCED } from './chrony-lines.test-helper.js';

// The time source's pure parts; the specs that run a (stand-in) chronyc are in test/chronyc.spec.ts.
describe('parseChronyTracking and judgeTracking', () => {
  it('reads a synchronised line as healthy, with its offset', () => {
    const t = parseChronyTracking(`${SYNCED}\n`);
    expect(t).toMatchObject({
      referenceId: 'A9FEA97B',
      referenceName: '169.254.169.123',
      stratum: 4,
      leapStatus: 'Normal',
    });
    expect(t.systemTimeOffsetSeconds).toBeCloseTo(0.000001234, 12);
    const r = judgeTracking(t);
    expect(r.healthy).toBe(true);
    expect(r.problem).toBeUndefined();
    expect(r.message).toMatch(/synchronised \(reference 169\.254\.169\.123, stratum 4, offset 0\.001 ms\)/);
    expect(r.offsetSeconds).toBeCloseTo(0.000001234, 12);
  });

  it.each([
    ['unsynchronised (local reference)', UNSYNCED, /not synchronised/, 'not-synchronised'],
    ['no reference at all', NO_REFERENCE, /not synchronised/, 'not-synchronised'],
    [
      'an offset beyond the 10 ms bound',
      LARGE_OFFSET,
      /-25\.300 ms off its reference, more than the 10 ms bound/,
      'offset-too-large',
    ],
  ])('judges %s unhealthy, saying why', (_name, line, message, problem) => {
    const r = judgeTracking(parseChronyTracking(line));
    expect(r.healthy).toBe(false);
    expect(r.message).toMatch(message);
    expect(r.problem).toBe(problem);
  });

  it('accepts a leap-second announcement and a custom bound', () => {
    expect(judgeTracking(parseChronyTracking(LEAP_INSERT)).healthy).toBe(true);
    expect(judgeTracking(parseChronyTracking(LEAP_INSERT), 0.5).healthy).toBe(false);
  });

  it.each([
    ['', /expected 14 comma-separated fields/],
    ['506 Cannot talk to daemon', /expected 14 comma-separated fields from chronyc -c tracking, got 1/],
    [SYNCED.replace(',4,', ',four,'), /field 3 \(stratum\) is not a number/],
    [SYNCED.replace('0.000001234', ''), /field 5 \(system time\) is not a number/],
    [SYNCED.replace('Normal', 'Sideways'), /field 14 \(leap status\) is unknown/],
    [SYNCED.replace('A9FEA97B', 'zz'), /field 1 \(reference ID\) is not hex/],
  ])('refuses garbage %j', (line, message) => {
    expect(() => parseChronyTracking(line)).toThrow(message);
  });
});

describe('untilTimeSourceHealthy', () => {
  const unhealthy = { healthy: false, problem: 'not-synchronised', message: 'chrony: not synchronised' } as const;
  const healthy = { healthy: true, message: 'chrony: synchronised' } as const;

  it('reads again while unhealthy, telling each unhealthy reading, and resolves with the first healthy one', async () => {
    const readings = [unhealthy, unhealthy, healthy];
    const check = {
      start: () => Promise.resolve(readings.shift() ?? healthy),
      readNow: () => Promise.resolve(readings.shift() ?? healthy),
    };
    const told: string[] = [];
    const r = await untilTimeSourceHealthy(check, {
      retryMs: 1,
      signal: new AbortController().signal,
      onUnhealthy: (x) => told.push(x.message),
    });
    expect(r).toEqual(healthy);
    expect(told).toEqual([unhealthy.message, unhealthy.message]);
    expect(readings).toHaveLength(0);
  });

  it("an abort during the wait rejects with the signal's own reason (what a caller's close() gave), not a timer's AbortError", async () => {
    const abort = new AbortController();
    const reason = new Error('boot aborted: SIGTERM');
    let reads = 0;
    const check = {
      start: () => Promise.resolve(unhealthy),
      readNow: () => {
        reads++;
        return Promise.resolve(unhealthy);
      },
    };
    const waiting = untilTimeSourceHealthy(check, {
      retryMs: 60_000,
      signal: abort.signal,
      onUnhealthy: () => abort.abort(reason),
    });
    await expect(waiting).rejects.toBe(reason);
    expect(reads).toBe(0);
  });
});
