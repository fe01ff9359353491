import type { ClockSource } from './clock-source.js';

/**
 * The process's real clocks, one definition for every package that reads time (the lease, the clock guard, the
 * embedded source; issue 34), beside the {@link ClockSource} contract it fills. The core itself still reads no clock:
 * no core file imports this one (lint: docs/style.md "Layers"), the minter is given each millisecond; the
 * packages that default to the real clocks import this value.
 */
export const systemClock: ClockSource = Object.freeze({
  nowMs: () => Date.now(),
  monoMs: () => performance.now(),
});
