import { systemClientClock } from './clock.js';

describe('systemClientClock', () => {
  it('is monotonic and runs scheduled callbacks, which can be cancelled', async () => {
    const a = systemClientClock.monoMs();
    const ran: string[] = [];
    const cancel = systemClientClock.schedule(() => ran.push('cancelled'), 1);
    cancel();
    await new Promise<void>((resolve) => systemClientClock.schedule(() => (ran.push('ran'), resolve()), 5));
    expect(ran).toEqual(['ran']);
    expect(systemClientClock.monoMs()).toBeGreaterThan(a);
  });

  it('treats an infinite delay as "not for a very long time", not as 1 ms', async () => {
    let fired = false;
    const cancel = systemClientClock.schedule(() => (fired = true), Infinity);
    await new Promise((resolve) => setTimeout(resolve, 20));
    cancel();
    expect(fired).toBe(false);
  });
});
