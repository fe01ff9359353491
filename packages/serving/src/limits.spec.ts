import { SERVING_LIMITS, resolveServingLimits } from './limits.js';

describe('resolveServingLimits', () => {
  it('fills what is not given with the defaults, keeps what is, and ignores other keys', () => {
    const limits = resolveServingLimits({ maxCount: 10, idleTimeoutMs: 1000, ...{ region: 3 } });
    expect(limits).toEqual({
      maxCount: 10,
      requestTimeoutMs: 5000,
      shutdownTimeoutMs: 5000,
      maxBodyBytes: 65_536,
      maxConnections: 4096,
      maxStreamsInFlight: 2048,
      prefaceTimeoutMs: 4000,
      idleTimeoutMs: 1000,
      stalledWriteTimeoutMs: 10_000,
    });
  });

  it('names every value outside its bounds, or not an integer', () => {
    expect(() => resolveServingLimits({ maxCount: 65_537, maxBodyBytes: 1023, requestTimeoutMs: 1.5 })).toThrow(
      new RangeError(
        'serving limits: maxCount must be an integer from 1 to 65536, got 65537; requestTimeoutMs must be an integer ' +
          'from 100 to 600000, got 1.5; maxBodyBytes must be an integer from 1024 to 16777216, got 1023',
      ),
    );
  });

  it('has every default inside its own bounds', () => {
    for (const limit of Object.values(SERVING_LIMITS)) {
      expect(limit.default).toBeGreaterThanOrEqual(limit.min);
      expect(limit.default).toBeLessThanOrEqual(limit.max);
    }
  });
});
