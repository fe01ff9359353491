/**
 * Embedded callers in the chaos fleet (issue 17): `count` processes minting with `@idgen/embedded` from their own
 * slot range of the nodes' region (one fewer slot than processes, so one is always a spare waiting to take over),
 * each under libfaketime and behind its own TCP proxies to every etcd member, so the run can kill, stop, cut off
 * and move the clock of each, as it does a node's. Their faults run on their own seeded timeline beside the
 * nodes' schedule; every ID they mint goes to the verifier with the nodes' (rules 1-3).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createTcpProxy, spawnProcess, type ProcessHandle, type TcpProxy } from '@idgen/testing';
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

/** A small seeded generator (mulberry32): the same seed gives the same embedded faults. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
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

export function createEmbeddedFleet(o: EmbeddedFleetOptions): EmbeddedFleet {
  if (o.count < 2) throw new RangeError('embedded callers: at least 2 (one is the spare)');
  const positions = Array.from({ length: o.count }, (_, i) => `e${i + 1}`);
  const workers = `${o.firstWorker}-${o.firstWorker + o.count - 2}`;
  const incarnations: Incarnation[] = [];
  const holdings: Holding[] = [];
  const faults: EmbeddedFaultRecord[] = [];
  const links = new Map<string, TcpProxy[]>();
  const counters = new Map<string, number>();
  let restarts = 0;
  const clockFile = (position: string): string => join(o.dir, `clock-${position}`);
  const current = (position: string): Incarnation | undefined =>
    [...incarnations].reverse().find((i) => i.position === position && i.handle.exitStatus() === undefined);

  /** Reads new lease lines: `lease: alive` names the holding (worker, lease id, floor). */
  const poll = (): void => {
    for (const inc of incarnations) {
      const lines = inc.handle.stdoutLines;
      for (; inc.seen < lines.length; inc.seen++) {
        const text = lines[inc.seen] ?? '';
        if (!text.includes('lease: alive')) continue;
        try {
          const j = JSON.parse(text) as { worker?: unknown; leaseId?: unknown; floorMs?: unknown; trueMs?: unknown };
          if (typeof j.worker === 'number' && typeof j.leaseId === 'string' && typeof j.floorMs === 'number') {
            holdings.push({
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
  };
  const timer = setInterval(poll, 200);

  const start = async (position: string): Promise<Incarnation> => {
    const n = (counters.get(position) ?? 0) + 1;
    counters.set(position, n);
    const name = `${position}#${n}`;
    await writeFile(clockFile(position), '+0\n');
    const file = join(o.dir, `embedded-${position}-${n}.blocks.jsonl`);
    const proxies = links.get(position) ?? [];
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
        workers,
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
          FAKETIME_TIMESTAMP_FILE: clockFile(position),
          FAKETIME_NO_CACHE: '1',
          DONT_FAKE_MONOTONIC: '1',
        },
        maxLines: 1_000_000,
      },
    );
    const inc: Incarnation = { name, position, node: embeddedNodeName(name), handle, file, seen: 0 };
    incarnations.push(inc);
    return inc;
  };

  const heldBy = (worker: number, other: string, sinceMs: number): Holding | undefined => {
    poll();
    return holdings.find((h) => h.worker === worker && h.name !== other && h.seenMs >= sinceMs);
  };
  /** The slot `inc` holds now: its latest holding, unless another process has held that worker since. */
  const holdingOf = (inc: Incarnation): Holding | undefined => {
    poll();
    const mine = [...holdings].reverse().find((h) => h.name === inc.name);
    if (mine === undefined) return undefined;
    return holdings.some((h) => h.worker === mine.worker && h.name !== inc.name && h.seenMs > mine.seenMs)
      ? undefined
      : mine;
  };

  return {
    workers,
    holdings,
    faults,
    async startAll() {
      for (const p of positions) {
        const proxies: TcpProxy[] = [];
        for (const e of o.etcd) proxies.push(await createTcpProxy({ target: e.replace(/^[a-z]+:\/\//, '') }));
        links.set(p, proxies);
      }
      for (const p of positions) await start(p);
      await Promise.all(incarnations.map((i) => i.handle.waitForLine(/embedded caller started/, 30_000)));
    },
    async waitHolding(n, timeoutMs) {
      const t0 = Date.now();
      for (;;) {
        poll();
        const holding = new Set(holdings.map((h) => h.name)).size;
        if (holding >= n) return;
        if (Date.now() - t0 > timeoutMs) {
          throw new Error(
            `only ${holding} of ${n} embedded callers hold a slot after ${timeoutMs} ms:\n${incarnations.map((i) => `--- ${i.name}\n${i.handle.tail(6)}`).join('\n')}`,
          );
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    async runFaults({ seed, loadStart, untilMs, allowances, signal }) {
      const rnd = random(seed ^ 0x5eed17);
      const ttlMs = o.leaseTtlSeconds * 1000;
      for (let k = 0; Date.now() < untilMs && !signal.aborted; k++) {
        await sleep(3000 + Math.floor(rnd() * 3000), signal);
        if (signal.aborted || Date.now() >= untilMs) break;
        const kind = EMBEDDED_FAULT_KINDS[k % EMBEDDED_FAULT_KINDS.length] as EmbeddedFaultKind;
        // A caller holding a slot (a spare's fault would show nothing).
        poll();
        const holders = positions
          .map(current)
          .filter((i): i is Incarnation => i !== undefined && holdingOf(i) !== undefined);
        const inc = holders[Math.floor(rnd() * holders.length)];
        if (inc === undefined) continue;
        const worker = holdingOf(inc)?.worker;
        const begin = Date.now();
        const r: EmbeddedFaultRecord = {
          kind,
          target: `${inc.name} (worker ${worker ?? '-'})`,
          startedMs: begin - loadStart,
          endedMs: 0,
          notes: [],
        };
        faults.push(r);
        o.say(`  t+${((begin - loadStart) / 1000).toFixed(1)}s embedded fault ${kind} → ${r.target}`);
        const proxies = links.get(inc.position) ?? [];
        const takeover = async (limitMs: number): Promise<void> => {
          while (
            worker !== undefined &&
            heldBy(worker, inc.name, begin) === undefined &&
            Date.now() < begin + limitMs &&
            !signal.aborted
          )
            await sleep(100, signal);
          const t = worker === undefined ? undefined : heldBy(worker, inc.name, begin);
          r.notes.push(
            t === undefined
              ? `worker ${worker ?? '-'} not taken over`
              : `worker ${worker} taken over by ${t.name} after ${((t.seenMs - begin) / 1000).toFixed(1)} s`,
          );
        };
        switch (kind) {
          case 'kill': {
            await inc.handle.kill();
            await takeover(ttlMs * 2 + 2000);
            await start(inc.position);
            restarts++;
            r.notes.push('restarted');
            break;
          }
          case 'pause-past-ttl': {
            inc.handle.signal('SIGSTOP');
            await takeover(ttlMs * 2 + 2000);
            await sleep(500, signal);
            inc.handle.signal('SIGCONT');
            r.notes.push(`SIGCONT after ${((Date.now() - begin) / 1000).toFixed(1)} s`);
            break;
          }
          case 'partition': {
            for (const p of proxies) p.cut();
            await takeover(ttlMs * 2 + 2000);
            await sleep(500, signal);
            for (const p of proxies) p.restore();
            r.notes.push(`link restored after ${((Date.now() - begin) / 1000).toFixed(1)} s`);
            break;
          }
          case 'clock-back': {
            // 2 s back: far beyond the 10 ms tolerance, so the source fences until its clock passes its last ID.
            await writeFile(clockFile(inc.position), '-2\n');
            await sleep(3000, signal);
            await writeFile(clockFile(inc.position), '+0\n');
            r.notes.push('clock -2 s for 3 s');
            break;
          }
          case 'partition-clock-forward': {
            // Cut off, then the wall clock 8 s ahead while the monotonic deadline still runs: the wall ceiling fences it.
            for (const p of proxies) p.cut();
            const a: ClockAllowance = {
              node: inc.node,
              fromMs: Date.now(),
              toMs: Number.POSITIVE_INFINITY,
              aheadMs: 8000,
            };
            allowances.push(a);
            await writeFile(clockFile(inc.position), '+8\n');
            await takeover(ttlMs * 2 + 2000);
            // Until true time has passed what it could have minted ahead (8 s + TTL − margin after the cut).
            await sleep(begin + 8000 + ttlMs - Date.now(), signal);
            await writeFile(clockFile(inc.position), '+0\n');
            a.toMs = Date.now() + 1000;
            for (const p of proxies) p.restore();
            r.notes.push(`clock +8 s and cut off for ${((Date.now() - begin) / 1000).toFixed(1)} s`);
            break;
          }
        }
        r.endedMs = Date.now() - loadStart;
      }
    },
    async stopAll(graceMs) {
      await Promise.all(
        incarnations.filter((i) => i.handle.exitStatus() === undefined).map((i) => i.handle.stop(graceMs)),
      );
      poll();
      clearInterval(timer);
      await Promise.all([...links.values()].flat().map((p) => p.close()));
    },
    async blocks() {
      const all = await Promise.all(incarnations.map((inc, i) => readBlocksFile(inc.file, 1000 + i)));
      return all.flat();
    },
    summary: () => {
      const refusedBy: Record<string, number> = {};
      for (const inc of incarnations) {
        const stopped = inc.handle.stdoutLines.find((l) => l.includes('embedded caller stopped'));
        if (stopped === undefined) continue;
        try {
          const j = JSON.parse(stopped) as { refusedBy?: Record<string, number> };
          for (const [k, v] of Object.entries(j.refusedBy ?? {})) refusedBy[k] = (refusedBy[k] ?? 0) + v;
        } catch {
          // a torn line
        }
      }
      return { processes: incarnations.length, restarts, refusedBy };
    },
  };
}
