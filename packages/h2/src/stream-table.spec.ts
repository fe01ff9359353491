import fc from 'fast-check';
import { StreamTable } from './stream-table.js';

describe('StreamTable', () => {
  it('behaves as a Map for get, set, has, delete, size and iteration under random operations', () => {
    type Op = { kind: 'set'; key: number; value: number } | { kind: 'delete'; key: number } | { kind: 'clear' };
    const key = fc.integer({ min: 0, max: 40 });
    const op = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant<'set'>('set'), key, value: fc.integer() }) },
      { weight: 5, arbitrary: fc.record({ kind: fc.constant<'delete'>('delete'), key }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant<'clear'>('clear') }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops: Op[]) => {
        const table = new StreamTable<number, number>(2);
        const map = new Map<number, number>();
        for (const o of ops) {
          if (o.kind === 'set') {
            expect(table.set(o.key, o.value)).toBe(table);
            map.set(o.key, o.value);
          } else if (o.kind === 'delete') {
            expect(table.delete(o.key)).toBe(map.delete(o.key));
          } else {
            table.clear();
            map.clear();
          }
          expect(table.size).toBe(map.size);
        }
        for (let k = 0; k <= 40; k++) {
          expect(table.get(k)).toBe(map.get(k));
          expect(table.has(k)).toBe(map.has(k));
        }
        const sorted = (entries: Iterable<[number, number]>) => [...entries].sort((a, b) => a[0] - b[0]);
        expect(sorted(table)).toEqual(sorted(map));
        expect([...table.keys()].sort((a, b) => a - b)).toEqual([...map.keys()].sort((a, b) => a - b));
        expect([...table.values()].sort((a, b) => a - b)).toEqual([...map.values()].sort((a, b) => a - b));
      }),
      { numRuns: 300 },
    );
  });

  it('forEach visits the entries present when it was called, even when the callback deletes them (as core.js does)', () => {
    const table = new StreamTable<number, string>();
    for (let i = 1; i <= 9; i += 2) table.set(i, `s${i}`);
    const seen: string[] = [];
    table.forEach((value, key) => {
      seen.push(value);
      table.delete(key);
      table.delete(key + 2);
    });
    expect(seen).toEqual(['s1', 's3', 's5', 's7', 's9']);
    expect(table.size).toBe(0);
  });
});
