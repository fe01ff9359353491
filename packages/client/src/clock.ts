/**
 * The client's view of time: a monotonic clock that can also schedule callbacks on itself.
 * Buffer ages, backoffs, per-attempt timeouts and call deadlines are all measured on it, never on the
 * wall clock, so a wall-clock jump cannot make a stale ID look fresh (docs/design.md §7: "age measured on the
 * monotonic clock from arrival"). Tests inject a manual clock and drive every timer by hand.
 */
export interface ClientClock {
  /** Monotonic milliseconds (any origin; only differences matter). */
  monoMs(): number;
  /** Runs `fn` once, `delayMs` from now on this clock. Returns a function that cancels it. */
  schedule(fn: () => void, delayMs: number): () => void;
}

const MAX_TIMER_MS = 2 ** 31 - 1;

/** The process's monotonic clock (`performance.now()`) with `setTimeout` timers. */
export const systemClientClock: ClientClock = Object.freeze({
  monoMs: () => performance.now(),
  schedule(fn: () => void, delayMs: number): () => void {
    // setTimeout turns anything above 2^31 − 1 ms (Infinity included) into 1 ms: clamp instead.
    const timer = setTimeout(fn, Math.min(Math.max(0, delayMs), MAX_TIMER_MS));
    return () => clearTimeout(timer);
  },
});
