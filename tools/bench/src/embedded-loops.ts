import { isIdsUnavailableError, type EmbeddedIdSource } from '@idgen/embedded';
import { BATCH, consume } from './core-loops.js';
import { type Round, nowNs } from './rounds.js';

/** Refusals an embedded source gave during a bench (fenced or not yet assigned: never an ID). */
export interface RefusalCount {
  refusals: number;
}

/**
 * `nextIdSync()` of an embedded source for about `budgetMs`, the clock read every {@link BATCH} calls; a refusal
 * is counted in `count` and the loop goes on. Its own function literal, as core-loops.ts says why.
 */
export function embeddedSyncRound(source: EmbeddedIdSource, count: RefusalCount): Round {
  return (budgetMs) => {
    let fold = 0n;
    let ids = 0;
    const start = nowNs();
    const end = start + budgetMs * 1e6;
    let now = start;
    while (now < end) {
      for (let i = 0; i < BATCH; i++) {
        try {
          fold ^= source.nextIdSync();
          ids++;
        } catch (error) {
          if (!isIdsUnavailableError(error)) throw error;
          count.refusals++;
        }
      }
      now = nowNs();
    }
    consume(fold);
    return { ids, calls: ids, elapsedNs: now - start };
  };
}
