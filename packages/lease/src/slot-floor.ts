import type { LeaseConfig } from './config.js';
import { computeFloor } from './records.js';
import type { LastMsRecord } from './records.js';

/**
 * The floor a claimed slot mints above (docs/design.md §5), read when the claim was answered: the highest of the
 * records' floor (`last-ms` + its TTL + the bound), the distrust floor (after etcd stopped being trustworthy at
 * `untrustedSinceWall`, no record is: that moment + the TTL ceiling + the bound) and the start hold
 * ({@link startHoldFloor}). `hold` is the start hold alone, for the state message.
 */
export function claimFloor(
  cfg: Pick<LeaseConfig, 'clock' | 'ttlMs' | 'clockBoundMs' | 'layout'>,
  last: LastMsRecord | undefined,
  untrustedSinceWall: number | undefined,
  holdTtlMs: number,
): { floorMs: number; hold: number } {
  const recordFloor = computeFloor(last, {
    ttlMs: cfg.ttlMs,
    clockBoundMs: cfg.clockBoundMs,
    epochMs: cfg.layout.epochMs,
  });
  // After etcd stopped being trustworthy, no record is: start above that moment + TTL + bound (docs/design.md §5).
  const untrusted = untrustedSinceWall;
  // Both holds cover a holder no record shows, so they wait by the deployment's TTL ceiling (§5, "The TTL ceiling").
  const untrustedFloor = untrusted === undefined ? recordFloor : untrusted + holdTtlMs + cfg.clockBoundMs;
  // The start hold: no first mint before the claim's answer + the ceiling + bound, whatever the records say (§5).
  const hold = startHoldFloor(cfg.clock.nowMs(), last, holdTtlMs, cfg.clockBoundMs);
  return { floorMs: Math.max(recordFloor, untrustedFloor, hold), hold };
}

/**
 * The state message of a slot held for its floor (`waiting-for-floor`): what the claim found on record, how long the
 * wait is (`waitMs`, from now), and whether the start hold set the floor.
 */
export function holdingMessage(
  claimed: { readonly region: number; readonly worker: number; readonly last: LastMsRecord | undefined },
  floorMs: number,
  hold: number,
  waitMs: number,
): string {
  return (
    `holding ${claimed.region}/${claimed.worker}; ` +
    (claimed.last === undefined
      ? 'never used before'
      : claimed.last.released
        ? `released cleanly at ${claimed.last.ms}`
        : `previous holder ended uncleanly (last-ms ${claimed.last.ms})`) +
    (waitMs >= 0 ? `: waiting until the clock passes ${floorMs} (${waitMs + 1} ms)` : '') +
    (floorMs === hold ? ' (the start hold)' : '')
  );
}

/**
 * The start hold (docs/design.md §5, "a claim never trusts the restored records"): the floor of a claim answered at
 * wall `claimedAtMs`. If etcd was restored from a snapshot before that answer, a holder of the lost history (the slot
 * claimed after the snapshot, its lease and `last-ms` gone with it) got its last keep-alive acknowledged before it,
 * so it mints nothing above that ack + TTL − margin: below this floor, even with the clocks `clockBoundMs` apart. The
 * restored records cannot say so, a clean release on record included (it may predate the lost claim), and a holder's
 * memory of the history has gaps (a partition), so every claim holds: one TTL (the longer of this node's and the
 * slot record's) + the bound.
 */
export function startHoldFloor(
  claimedAtMs: number,
  last: LastMsRecord | undefined,
  ttlMs: number,
  clockBoundMs: number,
): number {
  return claimedAtMs + Math.max(ttlMs, last?.ttlMs ?? 0) + clockBoundMs;
}
