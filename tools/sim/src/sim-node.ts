import type { GuardedMinter } from '@idgen/clock-guard';
import type { LeaseTarget } from '@idgen/lease';
import type { ClockSource, LeaseExtension, WorkerAssignment } from '@idgen/core';

/**
 * What one region's run (./deployment.ts) and the whole deployment's (./regions.ts) share about a simulated node:
 * the lease target that drives its real guard while the checker keeps what the lease promised, its lease timings,
 * and the callers' ask and duplicate check. Both scenarios replay by seed, so each helper keeps the order of every
 * step it takes from the code it replaced: hooks first, then the promise, then the guard.
 */

/** What the checker keeps of a node's lease: the wall ceiling and the monotonic deadline it last gave the guard. */
export interface HolderPromise {
  ceiling: number;
  deadline: number;
}

/** Hooks a scenario hears before the guard does: a slot assigned, or the assignment ended. */
export interface TargetHooks {
  assigned?(a: WorkerAssignment): void;
  unassigned?(): void;
}

/** The lease drives the real guard; the checker listens to what it promised (`node`'s ceiling and deadline). */
export function guardTarget(node: HolderPromise, guard: GuardedMinter, hooks: TargetHooks = {}): LeaseTarget {
  return {
    assign(a: WorkerAssignment): void {
      hooks.assigned?.(a);
      node.ceiling = a.ceilingMs;
      node.deadline = a.deadlineMonoMs;
      guard.assign(a);
    },
    extend(e: LeaseExtension): void {
      node.ceiling = Math.max(node.ceiling, e.ceilingMs);
      node.deadline = Math.max(node.deadline, e.deadlineMonoMs);
      guard.extend(e);
    },
    unassign(reason: 'lease' | 'draining' | 'not-assigned', message: string): void {
      hooks.unassigned?.();
      guard.unassign(reason, message);
    },
    lastMintedMs: () => guard.lastMintedMs(),
  };
}

/**
 * The lease options of a node on `ttlSeconds` that are timings: a short TTL needs quick keep-alives (@idgen/testing's
 * QUICK_LEASE_SETTINGS); longer ones the defaults.
 */
export function leaseTimings(ttlSeconds: number): {
  ttlSeconds: number;
  keepAliveIntervalMs?: number;
  keepAliveTimeoutMs?: number;
  fenceMarginMs?: number;
  requestTimeoutMs: number;
  backoff: { initialMs: number; maxMs: number };
} {
  return {
    ttlSeconds,
    ...(ttlSeconds <= 3 ? { keepAliveIntervalMs: 400, keepAliveTimeoutMs: 300, fenceMarginMs: 500 } : {}),
    requestTimeoutMs: 1500,
    backoff: { initialMs: 50, maxMs: 400 },
  };
}

/**
 * A caller's ask: up to `count` IDs from `guard` at one instant, each handed to `each` as it comes. A refusal (the
 * guard throws: not assigned, fenced, out of its deadline) ends the ask.
 */
export function askIds(guard: GuardedMinter, count: number, each: (id: bigint) => void): void {
  for (let k = 0; k < count; k++) {
    let id: bigint;
    try {
      id = guard.next();
    } catch {
      return;
    }
    each(id);
  }
}

/** Every ID minted in a run, by key, and the holder that minted it first: the duplicate check. */
export class MintLog<K> {
  private readonly seen = new Map<K, string>();

  /**
   * Notes `key` minted by `holder`. When another holder minted it first, the duplicate in words (`name(key)` minted
   * by both), and the first holder stays on record.
   */
  duplicate(key: K, holder: string, name: (key: K) => string): string | undefined {
    const prior = this.seen.get(key);
    if (prior === undefined) {
      this.seen.set(key, holder);
      return undefined;
    }
    return `${name(key)} minted by ${prior} and by ${holder}`;
  }
}

/** Clock reads at one fake instant that count as 1 ms of a node's busy-wait. */
const SPIN_READS = 1000;

/**
 * A node's clocks on the process's fake clock. A process that busy-waits on its clock (the guard waits out a
 * rollback of up to 10 ms that way) spends real time doing it; the fake clock stands still within one synchronous
 * stretch, so such a wait would never end. Every SPIN_READS reads at one fake instant, this node's clocks move on by
 * 1 ms of their own (deterministic).
 */
export function spinningClock(): ClockSource & { wallOffset: number } {
  let spunMs = 0;
  let lastInstant = Number.NaN;
  let reads = 0;
  const spin = (): void => {
    const instant = performance.now();
    if (instant !== lastInstant) {
      lastInstant = instant;
      reads = 0;
    } else if (++reads >= SPIN_READS) {
      spunMs++;
      reads = 0;
    }
  };
  const clock = {
    wallOffset: 0,
    nowMs(): number {
      spin();
      return Date.now() + clock.wallOffset + spunMs;
    },
    monoMs(): number {
      spin();
      return performance.now() + spunMs;
    },
  };
  return clock;
}
