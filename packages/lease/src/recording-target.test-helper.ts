import { isFencedError, type GuardedMinter } from '@idgen/clock-guard';
import { createNoopMeter } from '@opentelemetry/api';
import type { Attributes, Counter, Meter, ObservableCallback, ObservableGauge } from '@opentelemetry/api';
import type { LeaseExtension, LeaseTarget, WorkerAssignment } from './types.js';

/** One call the lease made on a {@link RecordingTarget}, with the clocks at that moment. */
export interface TargetEvent {
  readonly kind: 'assign' | 'extend' | 'unassign';
  readonly mono: number;
  readonly wall: number;
  readonly assignment?: WorkerAssignment;
  readonly deadline?: number;
  readonly ceiling?: number;
  readonly reason?: string;
  readonly message?: string;
}

/** Shared by the targets of one test: records any moment two targets could mint in the same slot. */
export class SlotBook {
  readonly targets = new Set<RecordingTarget>();
  readonly violations: string[] = [];
}

/** A LeaseTarget that records every call (a stand-in for the clock guard in lease tests). */
export class RecordingTarget implements LeaseTarget {
  readonly events: TargetEvent[] = [];
  assignment: WorkerAssignment | undefined;
  deadline = Number.NEGATIVE_INFINITY;
  ceiling = Number.NEGATIVE_INFINITY;
  lastMinted = -1;
  private readonly waiters = new Set<() => void>();

  constructor(
    readonly name: string,
    private readonly book?: SlotBook,
  ) {
    book?.targets.add(this);
  }

  /** Whether this target could mint now: assigned, before its deadline, not above its ceiling (what the guard enforces). */
  canMint(mono = performance.now(), wall = Date.now()): boolean {
    return this.assignment !== undefined && mono < this.deadline && wall <= this.ceiling;
  }

  assign(a: WorkerAssignment): void {
    const mono = performance.now();
    for (const other of this.book?.targets ?? []) {
      if (
        other !== this &&
        other.assignment?.region === a.region &&
        other.assignment.worker === a.worker &&
        other.canMint(mono)
      ) {
        this.book?.violations.push(
          `${this.name} assigned ${a.region}/${a.worker} while ${other.name} could still mint in it`,
        );
      }
    }
    this.assignment = a;
    this.deadline = a.deadlineMonoMs;
    this.ceiling = a.ceilingMs;
    this.push({ kind: 'assign', mono, wall: Date.now(), assignment: a, deadline: a.deadlineMonoMs });
  }

  extend(e: LeaseExtension): void {
    if (e.deadlineMonoMs > this.deadline) this.deadline = e.deadlineMonoMs;
    if (e.ceilingMs > this.ceiling) this.ceiling = e.ceilingMs;
    this.push({
      kind: 'extend',
      mono: performance.now(),
      wall: Date.now(),
      deadline: e.deadlineMonoMs,
      ceiling: e.ceilingMs,
    });
  }

  unassign(reason: 'lease' | 'draining' | 'not-assigned', message: string): void {
    this.assignment = undefined;
    this.deadline = Number.NEGATIVE_INFINITY;
    this.ceiling = Number.NEGATIVE_INFINITY;
    this.push({ kind: 'unassign', mono: performance.now(), wall: Date.now(), reason, message });
  }

  lastMintedMs(): number {
    return this.lastMinted;
  }

  /** Pretends to mint now (if allowed): records the wall millisecond as the last minted one. */
  mint(): boolean {
    if (!this.canMint()) return false;
    this.lastMinted = Math.max(this.lastMinted, Date.now());
    return true;
  }

  of(kind: TargetEvent['kind']): TargetEvent[] {
    return this.events.filter((e) => e.kind === kind);
  }

  /** Resolves when an event matching `pred` has been recorded (already or later). */
  waitFor(pred: (e: TargetEvent) => boolean, timeoutMs = 20_000, what = 'event'): Promise<TargetEvent> {
    const found = this.events.find(pred);
    if (found !== undefined) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const e = this.events.find(pred);
        if (e !== undefined) {
          this.waiters.delete(check);
          clearTimeout(timer);
          resolve(e);
        }
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(
          new Error(
            `${this.name}: no ${what} within ${timeoutMs} ms; events: ${JSON.stringify(this.events.map((e) => e.kind))}`,
          ),
        );
      }, timeoutMs);
      this.waiters.add(check);
    });
  }

  private push(e: TargetEvent): void {
    this.events.push(e);
    for (const w of [...this.waiters]) w();
  }
}

let counter = 0;
/** A fresh key prefix per test, so tests sharing one etcd do not see each other's keys. */
export function uniquePrefix(name: string): string {
  counter += 1;
  return `/idgen-test/${name}-${process.pid}-${counter}`;
}

/** A Meter that records counter additions and gauge callbacks (the SDK belongs to apps, not packages). */
export function createRecordingMeter(): {
  meter: Meter;
  counts: Map<string, number>;
  /** Runs the observable callbacks of `name` and returns what they observed. */
  observe(name: string): number[];
} {
  const counts = new Map<string, number>();
  const callbacks = new Map<string, Set<ObservableCallback>>();
  const base = createNoopMeter();
  const meter: Meter = Object.assign(Object.create(base) as Meter, {
    createCounter(name: string): Counter {
      return {
        add(v: number, attrs?: Attributes) {
          const key =
            attrs === undefined || Object.keys(attrs).length === 0
              ? name
              : `${name}{${Object.entries(attrs)
                  .map(([k, x]) => `${k}=${String(x)}`)
                  .join(',')}}`;
          counts.set(key, (counts.get(key) ?? 0) + v);
        },
      };
    },
    createObservableGauge(name: string): ObservableGauge {
      const set = callbacks.get(name) ?? new Set<ObservableCallback>();
      callbacks.set(name, set);
      return {
        addCallback: (cb: ObservableCallback) => void set.add(cb),
        removeCallback: (cb: ObservableCallback) => void set.delete(cb),
      };
    },
  });
  return {
    meter,
    counts,
    observe(name) {
      const seen: number[] = [];
      for (const cb of callbacks.get(name) ?? []) void cb({ observe: (v: number) => void seen.push(v) });
      return seen;
    },
  };
}

/** Mints 64 IDs a timer turn (about one a millisecond) into `ids`, counting refusals by reason. */
export function mintLoop(guard: GuardedMinter) {
  const ids: bigint[] = [];
  const refusals = new Map<string, number>();
  let paused = false;
  let running = true;
  let maxMs = -1;
  const mintSome = (): void => {
    for (let i = 0; i < 64; i++) {
      try {
        ids.push(guard.next());
      } catch (e) {
        if (!isFencedError(e)) throw e;
        refusals.set(e.reason, (refusals.get(e.reason) ?? 0) + 1);
        break;
      }
    }
    maxMs = Math.max(maxMs, guard.lastMintedMs());
  };
  const turn = (): void => {
    if (!running) return;
    if (!paused) mintSome();
    setTimeout(turn, 0);
  };
  setTimeout(turn, 0);
  return {
    ids,
    refusals,
    maxMs: () => maxMs,
    /** Pauses, or resumes minting at once (in this turn, before any timer of the lease can run). */
    pause: (p: boolean) => {
      paused = p;
      if (!p) mintSome();
    },
    stop: () => {
      running = false;
    },
  };
}
