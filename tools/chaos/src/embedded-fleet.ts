/**
 * Embedded callers in the chaos fleet (issue 17): `count` processes minting with `@idgen/embedded` from their own
 * slot range of the nodes' region (one fewer slot than processes, so one is always a spare waiting to take over),
 * each under libfaketime and behind its own TCP proxies to every etcd member, so the run can kill, stop, cut off
 * and move the clock of each, as it does a node's. Their faults run on their own seeded timeline beside the
 * nodes' schedule; every ID they mint goes to the verifier with the nodes' (rules 1-3).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createRandom, createTcpProxy, spawnProcess, type ProcessHandle, type TcpProxy } from '@idgen/testing';
import { embeddedNodeName, readBlocksFile } from './records.js';
import { sleep } from './sleep.js';
import type { ClockAllowance, Holding, ReceivedBlock } from './verify.js';

/** What can happen to an embedded caller. */
export const EMBEDDED_FAULT_KINDS = [
  'kill',
  'pause-past-ttl',
  'partition',
  'clock-back',
  'partition-clock-forward',
] as const;
export type EmbeddedFaultKind = (typeof EMBEDDED_FAULT_KINDS)[number];

/** One fault on one embedded caller, for the report. */
export interface EmbeddedFaultRecord {
  readonly kind: EmbeddedFaultKind;
  readonly target: string;
  /** From the load start. */
  readonly startedMs: number;
  endedMs: number;
  readonly notes: string[];
}

export interface EmbeddedFleetOptions {
  readonly callerMain: string;
  readonly faketimeLib: string;
  readonly dir: string;
  readonly etcd: readonly string[];
  readonly region: number;
  readonly count: number;
  /** First slot of their range; the range is `first … first + count − 2`. */
  readonly firstWorker: number;
  readonly rate: number;
  readonly leaseTtlSeconds: number;
  readonly say: (line: string) => void;
}

interface Incarnation {
  readonly name: string;
  readonly position: string;
  readonly node: string;
  readonly handle: ProcessHandle;
  readonly file: string;
  seen: number;
}

export interface EmbeddedFleet {
  readonly workers: string;
  readonly holdings: Holding[];
  readonly faults: EmbeddedFaultRecord[];
  startAll(): Promise<void>;
  /** Waits until `n` of them hold a slot. */
  waitHolding(n: number, timeoutMs: number): Promise<void>;
  /** Runs the faults until `untilMs` (Unix ms), one at a time, from `loadStart`; clock allowances are pushed to `allowances`. */
  runFaults(o: {
    seed: number;
    loadStart: number;
    untilMs: number;
    allowances: ClockAllowance[];
    signal: AbortSignal;
  }): Promise<void>;
  stopAll(graceMs: number): Promise<void>;
  /** Every block every incarnation recorded (caller numbers from 1000). */
  blocks(): Promise<ReceivedBlock[]>;
  /** Processes, restarts, and the refusals by reason of the processes that stopped cleanly at the end. */
  summary(): { processes: number; restarts: number; refusedBy: Record<string, number> };
}

/** One embedded fault as it runs: the caller hit, its worker and links, and the record it writes. */
interface EmbeddedFaultRun {
  readonly inc: Incarnation;
  readonly worker: number | undefined;
  readonly begin: number;
  readonly record: EmbeddedFaultRecord;
  readonly proxies: readonly TcpProxy[];
  readonly ttlMs: number;
  readonly allowances: ClockAllowance[];
  readonly signal: AbortSignal;
  /** Waits until another process holds the worker (at most `limitMs` from the fault's begin), and notes it. */
  takeover(limitMs: number): Promise<void>;
}

/**
 * The embedded callers: their processes, proxies and holdings; the faults ({@link EMBEDDED_FAULTS}) run on them
 * one at a time. A class rather than a closure (the house rule: past ~150 lines a closure becomes named parts).
 */
class ChaosEmbeddedFleet implements EmbeddedFleet {
  readonly workers: string;
  readonly holdings: Holding[] = [];
  readonly faults: EmbeddedFaultRecord[] = [];
  readonly #o: EmbeddedFleetOptions;
  readonly #positions: readonly string[];
  readonly #incarnations: Incarnation[] = [];
  readonly #links = new Map<string, TcpProxy[]>();
  readonly #counters = new Map<string, number>();
  readonly #timer: NodeJS.Timeout;
  #restarts = 0;

  constructor(o: EmbeddedFleetOptions) {
    if (o.count < 2) throw new RangeError('embedded callers: at least 2 (one is the spare)');
    this.#o = o;
    this.#positions = Array.from({ length: o.count }, (_, i) => `e${i + 1}`);
    this.workers = `${o.firstWorker}-${o.firstWorker + o.count - 2}`;
    this.#timer = setInterval(() => this.#poll(), 200);
  }

  /** The wall-clock control file of `position` (libfaketime's `FAKETIME_TIMESTAMP_FILE`). */
  clockFile(position: string): string {
    return join(this.#o.dir, `clock-${position}`);
  }

  async startAll(): Promise<void> {
    for (const p of this.#positions) {
      const proxies: TcpProxy[] = [];
      for (const e of this.#o.etcd) proxies.push(await createTcpProxy({ target: e.replace(/^[a-z]+:\/\//, '') }));
      this.#links.set(p, proxies);
    }
    for (const p of this.#positions) await this.start(p);
    await Promise.all(this.#incarnations.map((i) => i.handle.waitForLine(/embedded caller started/, 30_000)));
  }

  async waitHolding(n: number, timeoutMs: number): Promise<void> {
    const t0 = Date.now();
    for (;;) {
      this.#poll();
      const holding = new Set(this.holdings.map((h) => h.name)).size;
      if (holding >= n) return;
      if (Date.now() - t0 > timeoutMs) {
        throw new Error(
          `only ${holding} of ${n} embedded callers hold a slot after ${timeoutMs} ms:\n${this.#incarnations.map((i) => `--- ${i.name}\n${i.handle.tail(6)}`).join('\n')}`,
        );
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async runFaults({
    seed,
    loadStart,
    untilMs,
    allowances,
    signal,
  }: Parameters<EmbeddedFleet['runFaults']>[0]): Promise<void> {
    const rnd = createRandom(seed ^ 0x5eed17); // the same seed gives the same embedded faults
    const ttlMs = this.#o.leaseTtlSeconds * 1000;
    for (let k = 0; Date.now() < untilMs && !signal.aborted; k++) {
      await sleep(3000 + Math.floor(rnd() * 3000), signal);
      if (signal.aborted || Date.now() >= untilMs) break;
      const kind = EMBEDDED_FAULT_KINDS[k % EMBEDDED_FAULT_KINDS.length] as EmbeddedFaultKind;
      const inc = this.#pickHolder(rnd);
      if (inc === undefined) continue;
      const f = this.#begin(kind, inc, { loadStart, ttlMs, allowances, signal });
      await EMBEDDED_FAULTS[kind](f, this);
      f.record.endedMs = Date.now() - loadStart;
    }
  }

  async stopAll(graceMs: number): Promise<void> {
    await Promise.all(
      this.#incarnations.filter((i) => i.handle.exitStatus() === undefined).map((i) => i.handle.stop(graceMs)),
    );
    this.#poll();
    clearInterval(this.#timer);
    await Promise.all([...this.#links.values()].flat().map((p) => p.close()));
  }

  async blocks(): Promise<ReceivedBlock[]> {
    const all = await Promise.all(this.#incarnations.map((inc, i) => readBlocksFile(inc.file, 1000 + i)));
    return all.flat();
  }

  summary(): { processes: number; restarts: number; refusedBy: Record<string, number> } {
    const refusedBy: Record<string, number> = {};
    for (const inc of this.#incarnations) {
      const stopped = inc.handle.stdoutLines.find((l) => l.includes('embedded caller stopped'));
      if (stopped === undefined) continue;
      try {
        const j = JSON.parse(stopped) as { refusedBy?: Record<string, number> };
        for (const [k, v] of Object.entries(j.refusedBy ?? {})) refusedBy[k] = (refusedBy[k] ?? 0) + v;
      } catch {
        // a torn line
      }
    }
    return { processes: this.#incarnations.length, restarts: this.#restarts, refusedBy };
  }

  /** A new process on `position` (a kill's restart counts as one). */
  async start(position: string, restart = false): Promise<Incarnation> {
    const o = this.#o;
    const n = (this.#counters.get(position) ?? 0) + 1;
    this.#counters.set(position, n);
    const name = `${position}#${n}`;
    await writeFile(this.clockFile(position), '+0\n');
    const file = join(o.dir, `embedded-${position}-${n}.blocks.jsonl`);
    const proxies = this.#links.get(position) ?? [];
    const handle = spawnProcess(
      process.execPath,
      [
        o.callerMain,
        '--name',
        name,
        '--file',
        file,
        '--etcd',
        proxies.map((p) => `http://${p.address}`).join(','),
        '--region',
        String(o.region),
        '--workers',
        this.workers,
        '--rate',
        String(o.rate),
        '--batch',
        '10',
        '--lease-ttl',
        String(o.leaseTtlSeconds),
      ],
      {
        env: {
          ...process.env,
          // docs/toolchain.md "Clock faults": the wall clock from the control file, the monotonic clock untouched.
          LD_PRELOAD: o.faketimeLib,
          FAKETIME_TIMESTAMP_FILE: this.clockFile(position),
          FAKETIME_NO_CACHE: '1',
          DONT_FAKE_MONOTONIC: '1',
        },
        maxLines: 1_000_000,
      },
    );
    const inc: Incarnation = { name, position, node: embeddedNodeName(name), handle, file, seen: 0 };
    this.#incarnations.push(inc);
    if (restart) this.#restarts++;
    return inc;
  }

  /** A caller holding a slot (a spare's fault would show nothing), or none. */
  #pickHolder(rnd: () => number): Incarnation | undefined {
    this.#poll();
    const holders = this.#positions
      .map((p) => this.#current(p))
      .filter((i): i is Incarnation => i !== undefined && this.#holdingOf(i) !== undefined);
    return holders[Math.floor(rnd() * holders.length)];
  }

  /** Opens the fault's record, announces it, and hands the handler what it needs. */
  #begin(
    kind: EmbeddedFaultKind,
    inc: Incarnation,
    s: { loadStart: number; ttlMs: number; allowances: ClockAllowance[]; signal: AbortSignal },
  ): EmbeddedFaultRun {
    const { loadStart, signal } = s;
    const worker = this.#holdingOf(inc)?.worker;
    const begin = Date.now();
    const r: EmbeddedFaultRecord = {
      kind,
      target: `${inc.name} (worker ${worker ?? '-'})`,
      startedMs: begin - loadStart,
      endedMs: 0,
      notes: [],
    };
    this.faults.push(r);
    this.#o.say(`  t+${((begin - loadStart) / 1000).toFixed(1)}s embedded fault ${kind} → ${r.target}`);
    const proxies = this.#links.get(inc.position) ?? [];
    const takeover = async (limitMs: number): Promise<void> => {
      while (
        worker !== undefined &&
        this.#heldBy(worker, inc.name, begin) === undefined &&
        Date.now() < begin + limitMs &&
        !signal.aborted
      )
        await sleep(100, signal);
      const t = worker === undefined ? undefined : this.#heldBy(worker, inc.name, begin);
      r.notes.push(
        t === undefined
          ? `worker ${worker ?? '-'} not taken over`
          : `worker ${worker} taken over by ${t.name} after ${((t.seenMs - begin) / 1000).toFixed(1)} s`,
      );
    };
    return { inc, worker, begin, record: r, proxies, ttlMs: s.ttlMs, allowances: s.allowances, signal, takeover };
  }

  #current(position: string): Incarnation | undefined {
    return [...this.#incarnations]
      .reverse()
      .find((i) => i.position === position && i.handle.exitStatus() === undefined);
  }

  /** Reads new lease lines: `lease: alive` names the holding (worker, lease id, floor). */
  #poll(): void {
    for (const inc of this.#incarnations) {
      const lines = inc.handle.stdoutLines;
      for (; inc.seen < lines.length; inc.seen++) {
        const text = lines[inc.seen] ?? '';
        if (!text.includes('lease: alive')) continue;
        try {
          const j = JSON.parse(text) as { worker?: unknown; leaseId?: unknown; floorMs?: unknown; trueMs?: unknown };
          if (typeof j.worker === 'number' && typeof j.leaseId === 'string' && typeof j.floorMs === 'number') {
            this.holdings.push({
              node: inc.node,
              name: inc.name,
              worker: j.worker,
              leaseId: j.leaseId,
              floorMs: j.floorMs,
              seenMs: typeof j.trueMs === 'number' ? j.trueMs : Date.now(),
            });
          }
        } catch {
          // a torn line
        }
      }
    }
  }

  #heldBy(worker: number, other: string, sinceMs: number): Holding | undefined {
    this.#poll();
    return this.holdings.find((h) => h.worker === worker && h.name !== other && h.seenMs >= sinceMs);
  }

  /** The slot `inc` holds now: its latest holding, unless another process has held that worker since. */
  #holdingOf(inc: Incarnation): Holding | undefined {
    this.#poll();
    const mine = [...this.holdings].reverse().find((h) => h.name === inc.name);
    if (mine === undefined) return undefined;
    return this.holdings.some((h) => h.worker === mine.worker && h.name !== inc.name && h.seenMs > mine.seenMs)
      ? undefined
      : mine;
  }
}

/** What an embedded fault does to its caller, one handler per {@link EmbeddedFaultKind}. */
const EMBEDDED_FAULTS: Readonly<
  Record<EmbeddedFaultKind, (f: EmbeddedFaultRun, fleet: ChaosEmbeddedFleet) => Promise<void>>
> = {
  async kill(f, fleet) {
    await f.inc.handle.kill();
    await f.takeover(f.ttlMs * 2 + 2000);
    await fleet.start(f.inc.position, true);
    f.record.notes.push('restarted');
  },
  async 'pause-past-ttl'(f) {
    f.inc.handle.signal('SIGSTOP');
    await f.takeover(f.ttlMs * 2 + 2000);
    await sleep(500, f.signal);
    f.inc.handle.signal('SIGCONT');
    f.record.notes.push(`SIGCONT after ${((Date.now() - f.begin) / 1000).toFixed(1)} s`);
  },
  async partition(f) {
    for (const p of f.proxies) p.cut();
    await f.takeover(f.ttlMs * 2 + 2000);
    await sleep(500, f.signal);
    for (const p of f.proxies) p.restore();
    f.record.notes.push(`link restored after ${((Date.now() - f.begin) / 1000).toFixed(1)} s`);
  },
  async 'clock-back'(f, fleet) {
    // 2 s back: far beyond the 10 ms tolerance, so the source fences until its clock passes its last ID.
    await writeFile(fleet.clockFile(f.inc.position), '-2\n');
    await sleep(3000, f.signal);
    await writeFile(fleet.clockFile(f.inc.position), '+0\n');
    f.record.notes.push('clock -2 s for 3 s');
  },
  async 'partition-clock-forward'(f, fleet) {
    const { inc, begin } = f;
    // Cut off, then the wall clock 8 s ahead while the monotonic deadline still runs: the wall ceiling fences it.
    for (const p of f.proxies) p.cut();
    const a: ClockAllowance = {
      node: inc.node,
      fromMs: Date.now(),
      toMs: Number.POSITIVE_INFINITY,
      aheadMs: 8000,
    };
    f.allowances.push(a);
    await writeFile(fleet.clockFile(inc.position), '+8\n');
    await f.takeover(f.ttlMs * 2 + 2000);
    // Until true time has passed what it could have minted ahead (8 s + TTL − margin after the cut).
    await sleep(begin + 8000 + f.ttlMs - Date.now(), f.signal);
    await writeFile(fleet.clockFile(inc.position), '+0\n');
    a.toMs = Date.now() + 1000;
    for (const p of f.proxies) p.restore();
    f.record.notes.push(`clock +8 s and cut off for ${((Date.now() - begin) / 1000).toFixed(1)} s`);
  },
};

/** Starts nothing yet: {@link EmbeddedFleet.startAll} does. `count` callers on slots `firstWorker …`. */
export function createEmbeddedFleet(o: EmbeddedFleetOptions): EmbeddedFleet {
  return new ChaosEmbeddedFleet(o);
}
