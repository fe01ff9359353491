import fc from 'fast-check';
import { DeadlineQueue } from './deadline-queue.js';

describe('DeadlineQueue', () => {
  it('expires items oldest first at their deadlines, skips removed ones, and counts what is left', () => {
    const q = new DeadlineQueue<{ n: number }>(16);
    const items = Array.from({ length: 5 }, (_, n) => ({ n }));
    const tickets = items.map((item, i) => q.add(item, 100 + i * 10));
    expect(q.remove(tickets[1] ?? -1, items[1] as { n: number })).toBe(true);
    expect(q.remove(tickets[1] ?? -1, items[1] as { n: number })).toBe(false);
    const expired: number[] = [];
    q.expire(125, (item) => expired.push(item.n));
    expect(expired).toEqual([0, 2]);
    expect(q.size).toBe(2);
    expect(q.remove(tickets[0] ?? -1, items[0] as { n: number })).toBe(false); // already expired
    q.expire(1000, (item) => expired.push(item.n));
    expect(expired).toEqual([0, 2, 3, 4]);
    expect(q.size).toBe(0);
  });

  it('matches a plain list under random adds, removes and sweeps, through growth and wrap-around', () => {
    type Op = { kind: 'add' } | { kind: 'remove'; pick: number } | { kind: 'expire'; advance: number };
    const op = fc.oneof(
      fc.constant<Op>({ kind: 'add' }),
      fc.nat(1000).map<Op>((pick) => ({ kind: 'remove', pick })),
      fc.nat(50).map<Op>((advance) => ({ kind: 'expire', advance })),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), fc.integer({ min: 1, max: 64 }), (ops, timeout) => {
        const q = new DeadlineQueue<{ id: number }>(16);
        const model: { id: number; deadline: number; ticket: number; item: { id: number } }[] = [];
        let now = 0;
        let next = 0;
        for (const o of ops) {
          now += 1;
          if (o.kind === 'add') {
            const item = { id: next++ };
            model.push({ id: item.id, deadline: now + timeout, ticket: q.add(item, now + timeout), item });
          } else if (o.kind === 'remove') {
            if (model.length === 0) continue;
            const [gone] = model.splice(o.pick % model.length, 1);
            if (gone === undefined) continue;
            expect(q.remove(gone.ticket, gone.item)).toBe(true);
          } else {
            now += o.advance;
            const got: number[] = [];
            q.expire(now, (item) => got.push(item.id));
            const due = model.filter((m) => m.deadline <= now).map((m) => m.id);
            expect(got).toEqual(due);
            model.splice(0, model.length, ...model.filter((m) => m.deadline > now));
          }
          expect(q.size).toBe(model.length);
        }
      }),
      { numRuns: 300 },
    );
  });
});
