import { CLIENT_DEFAULTS } from './defaults.js';
import { LATENCY_WINDOW, type NodeState } from './node-pool.js';

/**
 * Hedged refills (docs/design.md §7, after Dean and Barroso's "The Tail at Scale"): a refill a node has not
 * answered within its hedge delay is asked of a second node too; the first answer that passes the block
 * checks is handed out and the other is discarded, never handed out (a gap in the IDs, never a duplicate).
 * The delay is `latencyMultiple` × the node's recent 90th-percentile answer time, kept within
 * `minMs … maxMs`, so a frozen node (SIGSTOP, a paused VM: the connection stays up, nothing answers)
 * costs a caller milliseconds rather than `attemptTimeoutMs`.
 */
export interface HedgeOptions {
  /** Floor of the hedge delay, ms (default 15, or `maxMs` when that is less). */
  readonly minMs?: number;
  /**
   * Cap of the hedge delay, ms, below `attemptTimeoutMs` (default 100, or half of `attemptTimeoutMs` when
   * that is less); also the delay of a node with fewer than 4 timed answers.
   */
  readonly maxMs?: number;
  /** The delay is this multiple of the node's recent 90th-percentile answer time (default 3; 1 … 100). */
  readonly latencyMultiple?: number;
}

/** Default floor of the hedge delay: a loaded loopback answers within a few ms, a GC pause takes more. */
export const DEFAULT_HEDGE_MIN_MS = CLIENT_DEFAULTS.hedgeMinMs;
/** Default cap of the hedge delay. */
export const DEFAULT_HEDGE_MAX_MS = CLIENT_DEFAULTS.hedgeMaxMs;
/** Default multiple of a node's recent 90th-percentile answer time. */
export const DEFAULT_HEDGE_LATENCY_MULTIPLE = CLIENT_DEFAULTS.hedgeLatencyMultiple;

/** Timed answers a node needs before its own latency sets its delay (fewer: the cap). */
const MIN_SAMPLES = 4;

/** The resolved hedging policy of one client: when to ask a second node. */
export class HedgePolicy {
  /** Sorted copy of one node's ring, reused: the delay costs no allocation. */
  private readonly sorted = new Float64Array(LATENCY_WINDOW);

  private constructor(
    readonly minMs: number,
    readonly maxMs: number,
    readonly latencyMultiple: number,
  ) {}

  /**
   * The policy of the `hedge` option: `undefined` when hedging is off (`false`). Ranges are checked here
   * and a value out of range is a `RangeError` naming it.
   */
  static from(option: boolean | HedgeOptions | undefined, attemptTimeoutMs: number): HedgePolicy | undefined {
    if (option === false) return undefined;
    const o: HedgeOptions = option === true || option === undefined ? {} : option;
    const maxMs = o.maxMs ?? Math.min(DEFAULT_HEDGE_MAX_MS, attemptTimeoutMs / 2);
    if (!(typeof maxMs === 'number' && maxMs > 0 && maxMs < attemptTimeoutMs)) {
      throw new RangeError(
        `hedge.maxMs must be a number of ms above 0 and below attemptTimeoutMs (${attemptTimeoutMs}), got ${String(maxMs)}`,
      );
    }
    const minMs = o.minMs ?? Math.min(DEFAULT_HEDGE_MIN_MS, maxMs);
    if (!(typeof minMs === 'number' && minMs > 0 && minMs <= maxMs)) {
      throw new RangeError(
        `hedge.minMs must be a number of ms above 0 and at most hedge.maxMs (${maxMs}), got ${String(minMs)}`,
      );
    }
    const multiple = o.latencyMultiple ?? DEFAULT_HEDGE_LATENCY_MULTIPLE;
    if (!(typeof multiple === 'number' && multiple >= 1 && multiple <= 100)) {
      throw new RangeError(`hedge.latencyMultiple must be a number from 1 to 100, got ${String(multiple)}`);
    }
    return new HedgePolicy(minMs, maxMs, multiple);
  }

  /** How long after asking `node` a second node is asked too. */
  delayMs(node: NodeState): number {
    const n = Math.min(node.latencySamples, LATENCY_WINDOW);
    if (n < MIN_SAMPLES) return this.maxMs;
    // Insertion sort of at most 16 numbers, once per refill.
    const s = this.sorted;
    for (let i = 0; i < n; i++) {
      const v = node.latencies[i] as number;
      let j = i - 1;
      while (j >= 0 && (s[j] as number) > v) {
        s[j + 1] = s[j] as number;
        j--;
      }
      s[j + 1] = v;
    }
    const p90 = s[Math.ceil(0.9 * n) - 1] as number;
    return Math.min(this.maxMs, Math.max(this.minMs, this.latencyMultiple * p90));
  }
}
