import type { MintedBlock } from '@idgen/core';
import type { GuardedMinter } from './guard.js';

/** The part of a guard the scheduler drives. */
export type SchedulableMinter = Pick<GuardedMinter, 'tryNextBlock'>;

/** Options of {@link createMintScheduler}. */
export interface MintSchedulerOptions {
  /**
   * How the scheduler waits for the next millisecond; default `setImmediate`: the check runs once per turn of the
   * event loop, after its I/O and timers, so nothing is held up and the new millisecond is caught within a turn
   * (a 1 ms timer fires up to a few milliseconds late under load, and each late millisecond is a worker's
   * 4,096 IDs lost). Tests pass their own.
   */
  readonly schedule?: (fn: () => void) => void;
}

interface Pending {
  readonly count: number;
  readonly abandoned: (() => boolean) | undefined;
  left: number;
  readonly blocks: MintedBlock[];
  readonly resolve: (blocks: MintedBlock[]) => void;
  readonly reject: (e: unknown) => void;
}

/** Requests waiting for later milliseconds, per caller. */
interface Line {
  readonly owner: object;
  readonly queue: Pending[];
}

/**
 * Hands out IDs without ever holding the event loop for a millisecond (the lease's
 * keep-alives and every other connection run on the same loop). A request the current
 * millisecond can serve is answered at once, synchronously, as before; the rest of one it cannot serve waits,
 * in order, for the next millisecond, checked once per turn of the event loop (and whenever a request
 * arrives), so the lease's keep-alives, other connections and the clock checks run in between. Waiting requests are served round robin between owners (a connection, say), one
 * owner's head request per turn, so one caller's burst of NextIds(4096) cannot starve another's NextIds(1):
 * each owner gets its share of every millisecond's 4,096 IDs.
 *
 * Ordering: a request never overtakes one of the same owner that came before it, and none is served while
 * others wait (the current millisecond is spent then anyway). A fence rejects the request it meets with the
 * guard's {@link FencedError}; IDs minted for a rejected request are dropped, never handed out twice.
 */
export interface MintScheduler {
  /**
   * IDs for `count`, now (an array) or later (a promise), for `owner` (any object; default one shared owner).
   * `abandoned`: asked before each later millisecond; true (the caller reset the stream, the connection went)
   * drops the request unminted and rejects it with {@link MintAbandonedError}, so the dead cannot queue work.
   */
  mint(count: number, owner?: object, abandoned?: () => boolean): MintedBlock[] | Promise<MintedBlock[]>;
  /** Requests waiting for a later millisecond. */
  waiting(): number;
  /** Rejects every waiting request with `reason` (shutdown). */
  close(reason: unknown): void;
}

const SHARED_OWNER = {};

/** A waiting request dropped because its caller was gone (nothing was minted for it after that). */
export class MintAbandonedError extends Error {
  override readonly name = 'MintAbandonedError';
  constructor() {
    super('the caller went away while its IDs waited for a later millisecond');
  }
}

/** Creates a {@link MintScheduler} over a guarded minter. */
export function createMintScheduler(guard: SchedulableMinter, options: MintSchedulerOptions = {}): MintScheduler {
  const schedule = options.schedule ?? ((fn: () => void) => void setImmediate(fn));
  const lines = new Map<object, Line>();
  /** Owners with waiting requests, in turn order (the first is served next). */
  let turn: Line[] = [];
  let waiting = 0;
  let scheduled = false;

  const arm = (): void => {
    if (scheduled || waiting === 0) return;
    scheduled = true;
    schedule(tick);
  };

  const settle = (line: Line, p: Pending, e?: unknown): void => {
    line.queue.shift();
    waiting--;
    if (line.queue.length === 0) lines.delete(line.owner);
    if (e === undefined) p.resolve(p.blocks);
    else p.reject(e);
  };

  /** The scheduled check: serve, and come back while anything waits. */
  function tick(): void {
    scheduled = false;
    serve();
    arm();
  }

  /**
   * Serves waiting requests round robin until the millisecond is spent (or nothing waits): the owner at the front
   * gets one request served and goes to the back; one that gets nothing (the millisecond is spent) keeps its place.
   * It costs the owners it serves, not the owners waiting: `mint` calls it for every request that arrives while
   * others wait, and a pass over every owner each time made a flood of requests on 300 connections stall the event
   * loop for seconds (past the lease's deadline).
   */
  function serve(): void {
    while (turn.length > 0) {
      const line = turn[0] as Line;
      // Drop heads whose callers are gone: nothing is minted for them.
      let p = line.queue[0];
      while (p?.abandoned?.() === true) {
        settle(line, p, new MintAbandonedError());
        p = line.queue[0];
      }
      if (p === undefined) {
        turn.shift();
        continue;
      }
      let gotAny = false;
      let spent = false;
      try {
        for (const b of guard.tryNextBlock(p.left)) {
          p.blocks.push(b);
          p.left -= b.count;
          gotAny = true;
        }
        if (p.left === 0) settle(line, p);
        else spent = true;
      } catch (e) {
        settle(line, p, e);
        gotAny = true;
      }
      if (gotAny) {
        turn.shift();
        if (line.queue.length > 0) turn.push(line);
      }
      if (spent) return;
    }
  }

  return {
    mint(count, owner = SHARED_OWNER, abandoned) {
      // A request arriving while others wait: serve those first if the clock has moved on (no waiting for
      // the scheduled check), then this one at once if the millisecond still has room.
      if (waiting > 0) serve();
      if (waiting === 0) {
        const blocks = guard.tryNextBlock(count);
        let got = 0;
        for (const b of blocks) got += b.count;
        if (got === count) return blocks;
        return enqueue(owner, count, count - got, blocks, abandoned);
      }
      return enqueue(owner, count, count, [], abandoned);
    },
    waiting: () => waiting,
    close(reason) {
      for (const line of turn) for (const p of line.queue.splice(0)) p.reject(reason);
      turn = [];
      lines.clear();
      waiting = 0;
    },
  };

  function enqueue(
    owner: object,
    count: number,
    left: number,
    blocks: MintedBlock[],
    abandoned: (() => boolean) | undefined,
  ): Promise<MintedBlock[]> {
    return new Promise<MintedBlock[]>((resolve, reject) => {
      let line = lines.get(owner);
      if (line === undefined) {
        line = { owner, queue: [] };
        lines.set(owner, line);
        turn.push(line);
      }
      line.queue.push({ count, abandoned, left, blocks, resolve, reject });
      waiting++;
      arm();
    });
  }
}
