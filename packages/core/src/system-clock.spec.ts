import { systemClock } from './index.js';

describe('systemClock', () => {
  it('reads the wall clock as Date.now() does, and a monotonic clock that does not go back', () => {
    const before = Date.now();
    const wall = systemClock.nowMs();
    const after = Date.now();
    expect(wall).toBeGreaterThanOrEqual(before);
    expect(wall).toBeLessThanOrEqual(after);
    const first = systemClock.monoMs();
    expect(systemClock.monoMs()).toBeGreaterThanOrEqual(first);
  });

  it('is frozen: a caller cannot swap the clocks every package shares', () => {
    expect(Object.isFrozen(systemClock)).toBe(true);
  });
});
