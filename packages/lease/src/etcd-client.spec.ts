import { watchBackoff } from './etcd-client.js';

describe('watchBackoff', () => {
  it('waits 100 ms, doubling up to 2 s, and never stops reconnecting', () => {
    const delays: number[] = [];
    let b: ReturnType<typeof watchBackoff> | undefined = watchBackoff(100);
    for (let i = 0; i < 8 && b !== undefined; i++) {
      delays.push(b.duration);
      b = b.next(undefined);
    }
    expect(delays).toEqual([100, 200, 400, 800, 1600, 2000, 2000, 2000]);
  });
});
