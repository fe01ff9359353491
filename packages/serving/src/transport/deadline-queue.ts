/**
 * Requests in flight with their deadlines, in arrival order (every request gets the same timeout, so the
 * oldest is always the next to expire): a ring of preallocated slots, so a sweep finds the late ones without
 * a timer per request.
 *
 * Not a `Map`: a long-lived Map with an entry added and removed per request is rebuilt every few requests,
 * and V8 (Node 20) leaves the entries in the discarded old-space copy, where scavenges take them for live:
 * every request object would then survive to the next Mark-Compact (`@idgen/h2`'s StreamTable has the story).
 * Here a finished request's slot is cleared at once and the arrays are only replaced when they fill.
 */
export class DeadlineQueue<T extends object> {
  private items: (T | undefined)[];
  private deadlines: Float64Array;
  /** Sequence numbers: the slot of sequence `s` is `s & mask`; `head` is the oldest not yet swept. */
  private head = 0;
  private tail = 0;
  private mask: number;
  private live = 0;

  constructor(capacity = 1024) {
    let size = 16;
    while (size < capacity) size *= 2;
    this.items = new Array<T | undefined>(size).fill(undefined);
    this.deadlines = new Float64Array(size);
    this.mask = size - 1;
  }

  /** Requests added and neither removed nor expired. */
  get size(): number {
    return this.live;
  }

  /** Adds an item due at `deadline` (not earlier than any deadline added before); returns its ticket for {@link remove}. */
  add(item: T, deadline: number): number {
    if (this.tail - this.head === this.items.length) this.grow();
    const seq = this.tail++;
    this.items[seq & this.mask] = item;
    this.deadlines[seq & this.mask] = deadline;
    this.live++;
    return seq;
  }

  /** Removes the item of `ticket`; false when it is no longer there (expired, or removed already). */
  remove(ticket: number, item: T): boolean {
    if (ticket < this.head || ticket >= this.tail) return false;
    const slot = ticket & this.mask;
    if (this.items[slot] !== item) return false;
    this.items[slot] = undefined;
    this.live--;
    return true;
  }

  /** Takes out every item whose deadline is at or before `now`, oldest first, and hands each to `expired`. */
  expire(now: number, expired: (item: T) => void): void {
    while (this.head < this.tail) {
      const slot = this.head & this.mask;
      const item = this.items[slot];
      if (item !== undefined) {
        if ((this.deadlines[slot] ?? 0) > now) return;
        this.items[slot] = undefined;
        this.live--;
        this.head++;
        expired(item);
      } else {
        this.head++;
      }
    }
  }

  private grow(): void {
    const size = this.items.length * 2;
    const items = new Array<T | undefined>(size).fill(undefined);
    const deadlines = new Float64Array(size);
    const mask = size - 1;
    for (let seq = this.head; seq < this.tail; seq++) {
      items[seq & mask] = this.items[seq & this.mask];
      deadlines[seq & mask] = this.deadlines[seq & this.mask] ?? 0;
    }
    this.items = items;
    this.deadlines = deadlines;
    this.mask = mask;
  }
}
