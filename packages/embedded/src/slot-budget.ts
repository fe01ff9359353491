import { DEFAULT_LAYOUT, type Layout } from '@idgen/core';
import { parseWorkerRange, type WorkerRange } from '@idgen/lease';

/**
 * The slots generator nodes claim from by default (`idgen-server --workers`): the largest region's 16 nodes plus
 * 2 spares (docs/design.md §3).
 */
export const DEFAULT_NODE_WORKERS: WorkerRange = Object.freeze({ first: 0, last: 17 });

/** The slots embedded sources claim from by default: the rest of the region's 128 (docs/design.md §7). */
export const DEFAULT_EMBEDDED_WORKERS: WorkerRange = Object.freeze({ first: 18, last: 127 });

/** What {@link slotBudget} counts. */
export interface SlotBudget {
  /** Slots of the home region's range. */
  readonly home: number;
  /** Slots under the borrowed spare codes: every slot of each (no node serves a spare code). */
  readonly borrowed: number;
  /** How many embedded sources can hold a slot at once. */
  readonly total: number;
}

/**
 * How many embedded sources a region's configuration has room for (docs/design.md §3, §7): the home range's slots,
 * plus all slots of each borrowed spare code. With the defaults, 18-127 is 110; lending the three spare codes adds
 * 3 × 128 = 384, 494 in all. Arithmetic only: borrowing itself is the lease's.
 */
export function slotBudget(
  options: { workers?: WorkerRange | string; borrowedCodes?: number; layout?: Layout } = {},
): SlotBudget {
  const layout = options.layout ?? DEFAULT_LAYOUT;
  const range =
    typeof options.workers === 'string'
      ? parseWorkerRange(options.workers)
      : (options.workers ?? DEFAULT_EMBEDDED_WORKERS);
  const borrowedCodes = options.borrowedCodes ?? 0;
  if (!Number.isInteger(borrowedCodes) || borrowedCodes < 0 || borrowedCodes > layout.maxRegion) {
    throw new RangeError(
      `borrowedCodes must be an integer from 0 to ${layout.maxRegion}, got ${String(borrowedCodes)}`,
    );
  }
  if (
    !Number.isInteger(range.first) ||
    !Number.isInteger(range.last) ||
    range.first < 0 ||
    range.last > layout.maxWorker ||
    range.first > range.last
  ) {
    throw new RangeError(`workers must be a range within 0-${layout.maxWorker}, got ${range.first}-${range.last}`);
  }
  const home = range.last - range.first + 1;
  const borrowed = borrowedCodes * (layout.maxWorker + 1);
  return { home, borrowed, total: home + borrowed };
}
