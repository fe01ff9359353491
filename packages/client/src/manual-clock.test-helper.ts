import type { ClientClock } from './clock.js';

interface Timer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** Lets every pending promise reaction (and the refill loops they drive) run. */
export async function flush(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** A monotonic clock that only moves when the test says so; its timers fire in time order. */
export class ManualClock implements ClientClock {
  private now: number;
  private seq = 0;
  private timers: Timer[] = [];

  constructor(startMs = 10_000) {
    this.now = startMs;
  }

  monoMs(): number {
    return this.now;
  }

  schedule(fn: () => void, delayMs: number): () => void {
    const timer: Timer = { at: this.now + Math.max(0, delayMs), seq: this.seq++, fn, cancelled: false };
    this.timers.push(timer);
    return () => {
      timer.cancelled = true;
    };
  }

  /** Timers still pending. */
  pending(): number {
    this.timers = this.timers.filter((t) => !t.cancelled);
    return this.timers.length;
  }

  /** Moves time forward by `ms`, firing due timers in order and letting promises settle after each. */
  async advance(ms: number): Promise<void> {
    const target = this.now + ms;
    await flush();
    for (;;) {
      this.timers = this.timers.filter((t) => !t.cancelled);
      let next: Timer | undefined;
      for (const t of this.timers) {
        if (t.at <= target && (next === undefined || t.at < next.at || (t.at === next.at && t.seq < next.seq)))
          next = t;
      }
      if (next === undefined) break;
      this.now = Math.max(this.now, next.at);
      next.cancelled = true;
      next.fn();
      await flush();
    }
    this.now = target;
    await flush();
  }
}
