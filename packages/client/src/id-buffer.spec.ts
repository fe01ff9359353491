import { IdBuffer } from './id-buffer.js';

describe('IdBuffer', () => {
  it('hands out each block in increasing order, blocks in arrival order, each ID once', () => {
    const b = new IdBuffer(1000);
    b.push(
      [
        { first: 100n, count: 3 },
        { first: 200n, count: 2 },
      ],
      0,
    );
    b.push([{ first: 50n, count: 1 }], 5);
    const out: bigint[] = [];
    for (let id = b.take(); id !== undefined; id = b.take()) out.push(id);
    expect(out).toEqual([100n, 101n, 102n, 200n, 201n, 50n]);
    expect(b.available).toBe(0);
  });

  it('expires whole blocks once maxAgeMs has passed since arrival', () => {
    const b = new IdBuffer(1000);
    b.push([{ first: 1n, count: 10 }], 0);
    b.push([{ first: 100n, count: 10 }], 400);
    b.take();
    expect(b.expire(999)).toBe(0);
    expect(b.expire(1000)).toBe(9);
    expect(b.available).toBe(10);
    expect(b.oldestArrivalMs()).toBe(400);
    expect(b.take()).toBe(100n);
    expect(b.expire(1400)).toBe(9);
    expect(b.take()).toBeUndefined();
    expect(b.oldestArrivalMs()).toBeUndefined();
  });

  it('ignores empty blocks and clears', () => {
    const b = new IdBuffer(1000);
    b.push(
      [
        { first: 1n, count: 0 },
        { first: 5n, count: 2 },
      ],
      0,
    );
    expect(b.available).toBe(2);
    expect(b.clear()).toBe(2);
    expect(b.take()).toBeUndefined();
  });

  it('stays correct across many small blocks (compaction)', () => {
    const b = new IdBuffer(1000);
    let next = 0n;
    const out: bigint[] = [];
    for (let round = 0; round < 500; round++) {
      b.push([{ first: next, count: 3 }], 0);
      next += 3n;
      out.push(b.take() as bigint, b.take() as bigint);
    }
    for (let id = b.take(); id !== undefined; id = b.take()) out.push(id);
    expect(out).toHaveLength(1500);
    expect(new Set(out).size).toBe(1500);
  });
});
