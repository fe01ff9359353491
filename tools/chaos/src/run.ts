/**
 * One chaos run (issue 7): a 3-member etcd cluster, `nodes` generator nodes sharing `slots` worker slots in
 * one region, `callers` caller processes minting continuously, the seeded fault schedule, and then the
 * verification of every ID every caller received. Loopback only; every process and directory it starts
 * is registered with `@idgen/testing`'s cleanup registry, so an interrupt or a crash still cleans up.
 */
import { execFileSync } from 'node:child_process';
import { createWriteStream, existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createConnectTransport } from '@idgen/client';
import {
  bindRegion,
  startEtcdCluster,
  spawnProcess,
  tempDir,
  type EtcdCluster,
  type ProcessHandle,
} from '@idgen/testing';
import { runAudit, type AuditOutcome } from './faults/audit.js';
import { doubleLoanFault } from './faults/double-loan.js';
import { judgeMemberDown, stopFollower } from './faults/etcd-member-down.js';
import { judgeSnapshotRestore, runSnapshotRestore } from './faults/snapshot-restore.js';
import { runStandaloneFault } from './faults/standalone.js';
import { judgeWrongRegion, runWrongRegionNode, wrongRegionOf } from './faults/wrong-region-node.js';
import { createEmbeddedFleet, type EmbeddedFaultRecord, type EmbeddedFleet } from './embedded-fleet.js';
import { createNodeFleet, type Incarnation, type NodeFleet } from './node-fleet.js';
import { sumNodeMetrics, type NodeMetrics } from './node-metrics.js';
import { probeBlocksFile, readBlocksFile, readCallerRecords, type BlockLine } from './records.js';
import { createSchedule, type Fault, type FaultKind, type Schedule } from './schedule.js';
import {
  checkClockBound,
  checkHandedOut,
  checkHolders,
  duplicatesPerWindow,
  expandBlocks,
  findDuplicates,
  outageWindows,
  type ClockAllowance,
  type ClockBoundReport,
  type DuplicateReport,
  type HandedOutReport,
  type HolderReport,
  type OutageReport,
  type Holding,
  type ReceivedBlock,
  type Window,
} from './verify.js';

/** Longest a fault waits for the previous one to be recovered from (fewer nodes serving than slots). */
const SETTLE_LIMIT_MS = 20_000;

/** Load after the last fault ends, at least. */
const TAIL_MS = 3000;

/** The clock bound chrony keeps (docs/design.md §3: clocks within 10 ms). */
export const CLOCK_BOUND_MS = 10;

/** Options of {@link runChaos}. */
export interface ChaosOptions {
  readonly durationMs: number;
  readonly seed: number;
  /** Keep every artifact here (created if missing); default a temp dir removed at the end. */
  readonly outDir?: string;
  readonly callers: number;
  readonly nodes: number;
  readonly slots: number;
  /** IDs per second per caller. */
  readonly rate: number;
  readonly leaseTtlSeconds: number;
  readonly region: number;
  /** `--server-main` as given, when given (for the report's reproduce line). */
  readonly serverMainFlag?: string;
  /** Only these fault kinds (`--faults`); default all. */
  readonly kinds?: readonly FaultKind[];
  /** `apps/server/dist/main.js` (or another build's, `--server-main`). */
  readonly serverMain: string;
  /** `tools/chaos/dist/caller.js`. */
  readonly callerMain: string;
  /** `apps/cli/dist/main.js`: `idgen audit` judges the run's etcd at the end. */
  readonly cliMain: string;
  /**
   * The operator's `idgen` the faults run (`spare lend`, `region restored`; `--cli-main`, or the CLI of the
   * `--server-main` build's tree): default `cliMain`. The final audit always runs `cliMain`.
   */
  readonly operatorCliMain?: string;
  /** Embedded callers (`@idgen/embedded` in their own processes, slots 18 and up; 0: none). */
  readonly embedded: number;
  /** `tools/chaos/dist/embedded-caller.js`. */
  readonly embeddedMain: string;
  /** Aborts the run (SIGINT/SIGTERM): cleanup still happens. */
  readonly signal: AbortSignal;
  readonly say: (line: string) => void;
}

/** What happened to one scheduled fault. */
export interface FaultRecord {
  readonly fault: Fault;
  /** When it began and was undone, ms from the load start. */
  startedMs: number;
  endedMs: number | undefined;
  /** What it hit (`n2#1`, `etcd m3`, `etcd (all)`). */
  target: string;
  /** What was observed (takeover, fences, exit code), for the report. */
  notes: string[];
  /** Nodes that could mint (`/readyz` 200) when the fault began. */
  servingAtStart: number;
  /** An expectation of issue 7 that did not hold (a fence that should not happen, or one that should). */
  expectationMissed: string | undefined;
  /** A safety expectation that did not hold (an ID handed out twice, a refused node that served): fails the run. */
  safetyViolation: string | undefined;
}

/** The result of a run. */
export interface ChaosResult {
  readonly seed: number;
  /** `--faults`, when given. */
  readonly kinds: readonly FaultKind[] | undefined;
  /** The server build the nodes ran, and `--server-main` when given. */
  readonly serverMain: string;
  readonly serverMainFlag: string | undefined;
  /** The planned load duration (`--duration`). */
  readonly durationMs: number;
  /** Periods in which a node's wall clock was set ahead of true time (rule 3 lets its IDs lead by that much). */
  readonly clockAllowances: readonly ClockAllowance[];
  readonly schedule: Schedule;
  readonly loadMs: number;
  readonly dir: string;
  readonly faults: readonly FaultRecord[];
  /** Faults not begun in time (recoveries took long); empty normally. */
  readonly skipped: readonly Fault[];
  readonly duplicates: DuplicateReport;
  /** The duplicates by the fault window their millisecond lies in (empty without duplicates). */
  readonly duplicatesByFault: readonly { label: string; duplicates: number }[];
  readonly handedOutDuplicates: DuplicateReport;
  readonly handedOut: HandedOutReport;
  readonly holders: HolderReport;
  readonly clock: ClockBoundReport;
  readonly outages: readonly OutageReport[];
  readonly metrics: NodeMetrics;
  readonly perNodeMetrics: readonly { name: string; metrics: NodeMetrics }[];
  readonly fenceEvents: number;
  readonly fencesByReason: Readonly<Record<string, number>>;
  readonly nodeProcesses: number;
  readonly supervisorRestarts: number;
  /** Of those, spares that exited at boot because every slot was held (by design). */
  readonly spareRestarts: number;
  /** Blocks the run's own clock-jump probe received (verified with the callers'). */
  readonly probeBlocks: number;
  readonly callersSummary: readonly { caller: number; calls: number; ids: number; failed: number; blocks: number }[];
  /** The embedded callers: processes, restarts after a kill, their faults, and what they minted (all verified). */
  readonly embedded:
    | {
        readonly workers: string;
        readonly processes: number;
        readonly restarts: number;
        /** IdsUnavailableError reasons the embedded callers met (those that stopped cleanly at the end). */
        readonly refusedBy: Readonly<Record<string, number>>;
        readonly blocks: number;
        readonly ids: number;
        readonly faults: readonly EmbeddedFaultRecord[];
      }
    | undefined;
  /** `idgen audit` of the run's etcd after everything stopped (not ok: exit non-zero). */
  readonly audit: AuditOutcome;
  /** Rule violations (any: exit non-zero). */
  readonly violations: number;
  readonly expectationsMissed: number;
  /** Faults whose safety expectation did not hold (any: exit non-zero, like a rule violation). */
  readonly safetyViolations: number;
}

/** libfaketime.so.1 as docs/toolchain.md finds it (`dpkg -L libfaketime`); a clear error when missing. */
export function findFaketime(): string {
  let listing = '';
  try {
    listing = execFileSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    // not installed (or no dpkg)
  }
  const lib = listing.split('\n').find((l) => l.endsWith('libfaketime.so.1'));
  if (lib === undefined || !existsSync(lib)) {
    throw new Error(
      "libfaketime not found: install Debian's faketime (apt-get install faketime); the chaos run needs it for clock jumps",
    );
  }
  return lib;
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted || ms <= 0) {
      resolve();
      return;
    }
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/** Runs the whole thing. Throws on a setup failure; violations are in the result. */
export async function runChaos(o: ChaosOptions): Promise<ChaosResult> {
  const faketimeLib = findFaketime();
  const ttlMs = o.leaseTtlSeconds * 1000;
  const schedule = createSchedule({
    durationMs: o.durationMs,
    seed: o.seed,
    leaseTtlMs: ttlMs,
    ...(o.kinds !== undefined ? { kinds: o.kinds } : {}),
  });

  let dir: string;
  if (o.outDir !== undefined) {
    await mkdir(o.outDir, { recursive: true });
    dir = o.outDir;
  } else {
    dir = (await tempDir('idgen-chaos')).path; // removed by the cleanup registry
  }
  o.say(`run directory: ${dir}${o.outDir === undefined ? ' (removed at the end; --out keeps it)' : ''}`);

  o.say('starting a 3-member etcd cluster');
  const cluster: EtcdCluster = await startEtcdCluster(3, { readyTimeoutMs: 60_000 });
  o.say(`  etcd: ${cluster.endpoints.join(', ')}`);
  // The region's etcd is bound to its code before its first node, as idgen region init does (docs/design.md §5).
  await bindRegion(cluster.endpoints[0] as string, o.region);
  o.say(`  bound to region ${o.region} (/idgen/region)`);

  const fleet = createNodeFleet({
    serverMain: o.serverMain,
    faketimeLib,
    dir,
    etcd: cluster.endpoints,
    region: o.region,
    nodes: o.nodes,
    slots: o.slots,
    leaseTtlSeconds: o.leaseTtlSeconds,
    say: o.say,
  });
  o.say(
    `starting ${o.nodes} generator nodes (workers 0-${o.slots - 1}, lease TTL ${o.leaseTtlSeconds} s, under libfaketime)`,
  );
  await fleet.startAll();
  await fleet.waitReady(Math.min(o.slots, o.nodes), 90_000);
  o.say(
    `  ready: ${fleet.incarnations
      .filter((i) => i.readyMs !== undefined)
      .map((i) => `${i.name} ${i.url}`)
      .join(', ')}`,
  );

  o.say(`starting ${o.callers} callers at ${o.rate} IDs/s each`);
  const callers: ProcessHandle[] = [];
  for (let i = 0; i < o.callers; i++) {
    callers.push(
      spawnProcess(process.execPath, [
        o.callerMain,
        '--index',
        String(i),
        '--dir',
        dir,
        '--nodes-file',
        fleet.nodesFile,
        '--region',
        String(o.region),
        '--rate',
        String(o.rate),
        '--batch',
        '10',
      ]),
    );
  }
  await Promise.all(callers.map((c) => c.waitForLine(/caller started/, 30_000)));

  let embedded: EmbeddedFleet | undefined;
  if (o.embedded > 0) {
    embedded = createEmbeddedFleet({
      callerMain: o.embeddedMain,
      faketimeLib,
      dir,
      etcd: cluster.endpoints,
      region: o.region,
      count: o.embedded,
      firstWorker: 18,
      rate: o.rate,
      leaseTtlSeconds: o.leaseTtlSeconds,
      say: o.say,
    });
    o.say(
      `starting ${o.embedded} embedded callers (@idgen/embedded, slots ${embedded.workers}: one is a spare) at ${o.rate} IDs/s each, under libfaketime`,
    );
    await embedded.startAll();
    await embedded.waitHolding(o.embedded - 1, 90_000);
  }

  const loadStart = Date.now();
  const rel = (ms: number): number => ms - loadStart;
  let wrongRegionNodes = 0;
  const operatorCli = o.operatorCliMain ?? o.cliMain;
  /** When each `etcd-member-down` had its member stopped (judged in `verify`, with the window's failed calls). */
  const memberDowns = new Map<FaultRecord, { fromMs: number; toMs: number }>();
  const scrapeTimer = setInterval(() => void fleet.scrapeAll(), 2000);
  const records: FaultRecord[] = [];
  const skipped: Fault[] = [];
  const clockAllowances: ClockAllowance[] = [];
  /** Sets a node's clock ahead and records the allowance rule 3 gives its IDs until {@link clockBack}. */
  const clockAhead = async (inc: Incarnation, seconds: number): Promise<ClockAllowance> => {
    const a: ClockAllowance = {
      node: inc.url,
      fromMs: Date.now(),
      toMs: Number.POSITIVE_INFINITY,
      aheadMs: seconds * 1000,
    };
    clockAllowances.push(a);
    await fleet.setClock(inc.position, `+${seconds}`);
    return a;
  };
  /** Back to true time; IDs minted before it may still arrive for a moment (a response in flight). */
  const clockBack = async (inc: Incarnation, a: ClockAllowance): Promise<void> => {
    await fleet.setClock(inc.position, '+0');
    a.toMs = Date.now() + 1000;
  };
  /** Fences a node's guard logged since `fromMs`, by reason. */
  const fencesOf = (inc: Incarnation, fromMs: number, reason?: string): number =>
    fleet.fences.filter(
      (e) =>
        e.name === inc.name &&
        e.atMs >= fromMs &&
        e.source === 'guard' &&
        (reason === undefined || e.reason === reason),
    ).length;

  // While a node's clock jumps, the run itself asks it for one ID after another, so the jump meets a mint:
  // a small jump is then really waited out and a large one really fenced (the callers' buffered refills
  // reach a node only a few times a second). Every block it gets is verified like a caller's.
  const probeOut = createWriteStream(probeBlocksFile(dir), { flags: 'a' });
  // `until` is read on every request: a fault that ends early moves it.
  const probe = async (
    inc: Incarnation,
    until: number | { untilMs: number },
  ): Promise<{ ok: number; failed: number }> => {
    const stop = typeof until === 'number' ? { untilMs: until } : until;
    const transport = createConnectTransport({ url: inc.url, region: o.region });
    let ok = 0;
    let failed = 0;
    try {
      while (Date.now() < stop.untilMs && !o.signal.aborted) {
        try {
          const blocks = await transport.nextIds(1, { signal: AbortSignal.timeout(500), timeoutMs: 500 });
          const receivedMs = Date.now();
          for (const b of blocks) {
            const line: BlockLine = { node: inc.url, first: b.first.toString(), count: b.count, receivedMs };
            probeOut.write(`${JSON.stringify(line)}\n`);
          }
          ok++;
          // Back to back (one request in flight, ~1 ms on loopback): a jump of a few ms must meet a mint.
          await new Promise((r) => setImmediate(r));
        } catch {
          failed++;
          await sleep(2, o.signal);
        }
      }
    } finally {
      transport.close();
    }
    return { ok, failed };
  };

  const pickNode = async (f: Fault): Promise<Incarnation | undefined> => {
    let candidates = await fleet.serving();
    // Nobody serving (an earlier fault still recovering): hit a running node anyway.
    if (candidates.length === 0) {
      candidates = fleet.positions
        .map((p) => fleet.current(p))
        .filter((i): i is Incarnation => i !== undefined && !i.paused);
    }
    candidates.sort((a, b) => a.position.localeCompare(b.position));
    return candidates[Math.floor(f.pick * candidates.length)];
  };

  // A fault starts at its planned time, or later if the previous one has not yet been recovered from
  // (fewer than `slots` nodes serving): a fault that hits a fleet still down shows nothing. Recovery
  // after a whole-cluster etcd stop can take longer than its window; the wait is bounded and reported.
  const settle = async (): Promise<{ serving: Incarnation[]; waitedMs: number }> => {
    const t0 = Date.now();
    const want = Math.min(o.slots, o.nodes);
    for (;;) {
      const serving = await fleet.serving();
      if (serving.length >= want || Date.now() - t0 >= SETTLE_LIMIT_MS || o.signal.aborted)
        return { serving, waitedMs: Date.now() - t0 };
      await sleep(250, o.signal);
    }
  };

  const runFault = async (f: Fault, notBefore: number): Promise<number> => {
    await sleep(Math.max(loadStart + f.atMs, notBefore) - Date.now(), o.signal);
    if (o.signal.aborted) return Date.now();
    const settled = await settle();
    const begin = Date.now();
    if (o.signal.aborted) return begin;
    const r: FaultRecord = {
      fault: f,
      startedMs: rel(begin),
      endedMs: undefined,
      target: '-',
      notes: [
        `${settled.serving.length} serving${settled.waitedMs >= 500 ? ` (after waiting ${(settled.waitedMs / 1000).toFixed(1)} s for recovery)` : ''}`,
      ],
      servingAtStart: settled.serving.length,
      expectationMissed: undefined,
      safetyViolation: undefined,
    };
    records.push(r);
    const until = async (): Promise<void> => sleep(begin + f.effectMs - Date.now(), o.signal);
    const line = (): void => o.say(`  t+${(r.startedMs / 1000).toFixed(1)}s fault #${f.index} ${f.kind} → ${r.target}`);
    /** The fault's node: named in the record (with the worker it held), announced, its metrics scraped first. */
    const hitNode = async (noteWorker: boolean): Promise<Incarnation | undefined> => {
      const inc = await pickNode(f);
      if (inc === undefined) return undefined;
      r.target = inc.name;
      if (noteWorker) r.notes.push(`held worker ${inc.worker ?? '-'}`);
      line();
      await fleet.scrape(inc);
      return inc;
    };
    switch (f.kind) {
      case 'double-loan': {
        const nth = records.filter((x) => x.fault.kind === 'double-loan').length - 1;
        const announce = (target: string): void => void ((r.target = target), line());
        const common = { runEtcd: cluster.endpoints, region: o.region, prefix: ETCD_PREFIX, dir, announce };
        const j = await doubleLoanFault(
          {
            ...common,
            cliMain: operatorCli,
            otherRegion: wrongRegionOf(o.region),
            leaseTtlSeconds: o.leaseTtlSeconds,
            timeoutMs: 30_000,
          },
          nth,
        );
        Object.assign(r, { safetyViolation: j.safetyViolation, expectationMissed: j.expectationMissed }).notes.push(
          ...j.notes,
        );
        break;
      }
      case 'etcd-snapshot-restore': {
        const target = await hitNode(true);
        if (target === undefined) break;
        const common = { fleet, cluster, target, region: o.region, prefix: ETCD_PREFIX, dir, index: f.index };
        const s = await runSnapshotRestore({
          ...common,
          cliMain: operatorCli,
          want: Math.min(o.slots, o.nodes),
          leaseTtlSeconds: o.leaseTtlSeconds,
          sleep: (ms) => sleep(ms, o.signal),
          aborted: () => o.signal.aborted,
        });
        const j = judgeSnapshotRestore(s, ttlMs);
        Object.assign(r, { safetyViolation: j.safetyViolation, expectationMissed: j.expectationMissed }).notes.push(
          ...j.notes,
        );
        break;
      }
      case 'kill-node': {
        const inc = await hitNode(true);
        if (inc === undefined) break;
        inc.expectedExit = true;
        await inc.handle.kill();
        await until();
        if (o.signal.aborted) break;
        const next = await fleet.start(inc.position);
        r.notes.push(`restarted as ${next.name}`);
        break;
      }
      case 'sigterm-node': {
        const inc = await hitNode(true);
        if (inc === undefined) break;
        inc.expectedExit = true;
        const exit = await inc.handle.stop(15_000);
        r.notes.push(`exit code ${exit.code}${exit.signal !== null ? ` signal ${exit.signal}` : ''}`);
        if (exit.code !== 0)
          r.expectationMissed = `a SIGTERM should end in a clean stop (exit 0), got code ${exit.code} signal ${exit.signal}`;
        if (o.signal.aborted) break;
        const next = await fleet.start(inc.position);
        r.notes.push(`replacement ${next.name}`);
        break;
      }
      case 'pause-node': {
        const inc = await hitNode(true);
        if (inc === undefined) break;
        const worker = inc.worker;
        inc.paused = true;
        inc.handle.signal('SIGSTOP');
        const pausedAt = Date.now();
        // Stopped until the spare has taken the slot (and minted a moment), at most `effectMs`: then SIGCONT,
        // so the old holder wakes up to a slot that is someone else's (issue 7).
        const takenOver = (): Holding | undefined =>
          fleet.holdings.find((h) => h.worker === worker && h.name !== inc.name && h.seenMs >= pausedAt);
        while (
          worker !== undefined &&
          takenOver() === undefined &&
          Date.now() < begin + f.effectMs &&
          !o.signal.aborted
        ) {
          await sleep(100, o.signal);
        }
        if (takenOver() !== undefined) await sleep(Math.min(1000, begin + f.effectMs - Date.now()), o.signal);
        else await until();
        inc.handle.signal('SIGCONT');
        inc.paused = false;
        r.notes.push(`SIGCONT after ${((Date.now() - pausedAt) / 1000).toFixed(1)} s`);
        const takeover = takenOver();
        if (takeover !== undefined)
          r.notes.push(
            `worker ${worker} taken over by ${takeover.name} after ${((takeover.seenMs - pausedAt) / 1000).toFixed(1)} s`,
          );
        else r.expectationMissed = `no other node took worker ${worker ?? '-'} while ${inc.name} was stopped`;
        break;
      }
      case 'etcd-leader-stop': {
        const leader = await cluster.leader(10_000).catch(() => undefined);
        if (leader === undefined) {
          r.notes.push('no leader found');
          break;
        }
        r.target = `etcd ${leader.name}`;
        line();
        await leader.stop();
        await until();
        await leader.start().catch((e: unknown) => r.notes.push(`restart failed: ${String(e)}`));
        const next = await cluster.leader(10_000).catch(() => undefined);
        r.notes.push(`new leader ${next?.name ?? 'unknown'}`);
        break;
      }
      case 'etcd-cluster-stop': {
        r.target = 'etcd (all members)';
        line();
        // SIGKILL (a power cut): SIGTERM'd members wait for each other up to the 5 s grace, which would
        // make the outage longer than scheduled.
        await Promise.all(cluster.members.map((m) => m.kill()));
        r.notes.push(`all stopped after ${((Date.now() - begin) / 1000).toFixed(1)} s`);
        await until();
        const restart = Date.now();
        await Promise.all(cluster.members.map((m) => m.start())).catch((e: unknown) =>
          r.notes.push(`restart failed: ${String(e)}`),
        );
        r.notes.push(`healthy again ${((Date.now() - restart) / 1000).toFixed(1)} s after the restart`);
        break;
      }
      case 'etcd-pause-short':
      case 'etcd-pause-long': {
        r.target = 'etcd (all members, SIGSTOP)';
        line();
        for (const m of cluster.members) m.pause();
        await until();
        for (const m of cluster.members) m.resume();
        break;
      }
      case 'partition-node':
      case 'partition-clock-forward': {
        const inc = await hitNode(true);
        if (inc === undefined) break;
        const worker = inc.worker;
        const forward = f.kind === 'partition-clock-forward' ? (f.clockOffsetSeconds ?? 0) : 0;
        // The run asks the cut-off node for one ID after another: its callers still reach it, and whatever
        // it mints while it believes it holds the slot is verified like a caller's blocks.
        const stop = { untilMs: begin + f.effectMs };
        const probing = probe(inc, stop);
        await sleep(200, o.signal);
        const cutAt = Date.now();
        fleet.cutEtcd(inc.position);
        // Ahead at once, while its monotonic deadline still runs (up to TTL − margin after its last keep-alive).
        const allowance = forward > 0 ? await clockAhead(inc, forward) : undefined;
        const takenOver = (): Holding | undefined =>
          fleet.holdings.find((h) => h.worker === worker && h.name !== inc.name && h.seenMs >= cutAt);
        // Until the spare holds the slot (and a second more), and, with the clock ahead, until the successor's
        // clock has passed all the holder could have minted (offset + TTL − margin after the cut); at most `effectMs`.
        const earliestEnd = cutAt + (forward > 0 ? forward * 1000 + ttlMs - 1000 + 500 : 0);
        while (
          worker !== undefined &&
          takenOver() === undefined &&
          Date.now() < begin + f.effectMs &&
          !o.signal.aborted
        ) {
          await sleep(100, o.signal);
        }
        const taken = takenOver();
        await sleep(
          Math.min(Math.max(taken !== undefined ? taken.seenMs + 1000 : 0, earliestEnd), begin + f.effectMs) -
            Date.now(),
          o.signal,
        );
        stop.untilMs = Date.now();
        const p = await probing;
        if (allowance !== undefined) await clockBack(inc, allowance);
        fleet.restoreEtcd(inc.position);
        r.notes.push(`link restored after ${((Date.now() - cutAt) / 1000).toFixed(1)} s`);
        if (forward > 0) r.notes.push(`clock +${forward} s from the cut until then`);
        const takeover = takenOver();
        r.notes.push(
          `probe ${p.ok} ok / ${p.failed} refused; its fences: ${fencesOf(inc, cutAt)} (lease ${fencesOf(inc, cutAt, 'lease')}, clock-ahead ${fencesOf(inc, cutAt, 'clock-ahead')})`,
        );
        if (takeover !== undefined)
          r.notes.push(
            `worker ${worker} taken over by ${takeover.name} after ${((takeover.seenMs - cutAt) / 1000).toFixed(1)} s`,
          );
        else r.expectationMissed = `no other node took worker ${worker ?? '-'} while ${inc.name} was cut off from etcd`;
        if (r.expectationMissed === undefined && fencesOf(inc, cutAt) === 0) {
          r.expectationMissed = `${inc.name} never fenced while cut off from etcd for longer than the TTL`;
        }
        break;
      }
      case 'clock-forward': {
        const inc = await hitNode(false);
        if (inc === undefined) break;
        const forward = f.clockOffsetSeconds ?? 0;
        const before = inc.metrics;
        // Probed while ahead and after the return, until true time has passed what it minted ahead.
        const probing = probe(inc, begin + f.effectMs + forward * 1000 + 500);
        await sleep(200, o.signal);
        const aheadAt = Date.now();
        const allowance = await clockAhead(inc, forward);
        await until();
        const backAt = Date.now();
        await clockBack(inc, allowance);
        const p = await probing;
        await fleet.scrape(inc);
        const rollbacks = fencesOf(inc, backAt, 'clock-rollback');
        r.notes.push(
          `probe ${p.ok} ok / ${p.failed} refused; fences while ahead: ${fencesOf(inc, aheadAt) - fencesOf(inc, backAt)} (clock-ahead ${fencesOf(inc, aheadAt, 'clock-ahead') - fencesOf(inc, backAt, 'clock-ahead')}); ` +
            `after the return: clock-rollback ${rollbacks} (rollbacks fenced ${inc.metrics.rollbacksFenced - before.rollbacksFenced})`,
        );
        // Minting ahead, then back to true time, it must refuse until true time passes its last millisecond.
        if (
          rollbacks === 0 &&
          inc.metrics.rollbacksFenced === before.rollbacksFenced &&
          r.servingAtStart > 0 &&
          inc.exitedMs === undefined
        ) {
          r.expectationMissed = `${inc.name} did not fence on its clock's return from +${forward} s`;
        }
        break;
      }
      case 'etcd-slow-short':
      case 'etcd-slow-long': {
        const latency = f.latencyMs ?? 0;
        r.target = `every node's etcd link (+${latency} ms each way)`;
        line();
        fleet.setEtcdLatency(latency);
        await until();
        fleet.setEtcdLatency(0);
        break;
      }
      case 'wrong-region-node': {
        const wrong = wrongRegionOf(o.region);
        wrongRegionNodes++;
        const name = `wrong-region-${wrongRegionNodes}`;
        r.target = `${name} (region ${wrong} on region ${o.region}'s etcd)`;
        line();
        const w = await runWrongRegionNode({
          serverMain: o.serverMain,
          etcd: cluster.endpoints,
          wrongRegion: wrong,
          prefix: ETCD_PREFIX,
          slots: o.slots,
          leaseTtlSeconds: o.leaseTtlSeconds,
          dir,
          name,
          timeoutMs: 15_000,
        });
        const judged = judgeWrongRegion(w, o.region, wrong);
        r.notes.push(...judged.notes);
        r.expectationMissed = judged.expectationMissed;
        r.safetyViolation = judged.safetyViolation;
        break;
      }
      case 'etcd-member-down': {
        const down = await stopFollower(
          cluster,
          f.pick,
          f.effectMs,
          begin,
          (ms) => sleep(ms, o.signal),
          (target) => {
            r.target = target;
            line();
          },
        );
        r.target = down.target;
        r.notes.push(...down.notes);
        if (down.stoppedAtMs !== undefined)
          memberDowns.set(r, { fromMs: down.stoppedAtMs, toMs: down.startedAtMs ?? Date.now() });
        break;
      }
      case 'standalone-pause':
      case 'standalone-step':
      case 'standalone-empty-state': {
        const name = `${f.kind}-${f.index}`;
        r.target = `${name} (standalone nodes on their own --state-file)`;
        line();
        const s = await runStandaloneFault(f.kind, { ...o, faketimeLib, dir, name, effectMs: f.effectMs });
        Object.assign(r, {
          target: s.target,
          expectationMissed: s.expectationMissed,
          safetyViolation: s.safetyViolation,
        });
        r.notes.push(...s.notes);
        break;
      }
      case 'clock-jump-small':
      case 'clock-jump-large': {
        const inc = await hitNode(false);
        if (inc === undefined) break;
        const before = inc.metrics;
        const probing = probe(inc, begin + f.effectMs + 300);
        await sleep(200, o.signal);
        await fleet.setClock(inc.position, String(f.clockOffsetSeconds ?? 0));
        await until();
        // Back to true time: a jump forward, harmless (the guard only refuses going back).
        await fleet.setClock(inc.position, '+0');
        const p = await probing;
        await fleet.scrape(inc);
        r.notes.push(
          `probe ${p.ok} ok / ${p.failed} refused; rollbacks waited out ${inc.metrics.rollbacksWaited - before.rollbacksWaited}, fenced ${inc.metrics.rollbacksFenced - before.rollbacksFenced}`,
        );
        break;
      }
    }
    r.endedMs = rel(Date.now());
    return begin;
  };

  o.say(`load running for ${(o.durationMs / 1000).toFixed(0)} s with ${schedule.faults.length} faults`);
  // The embedded callers' faults run on their own timeline, beside the nodes' (their slots are apart).
  const embeddedFaults =
    embedded?.runFaults({
      seed: o.seed,
      loadStart,
      untilMs: loadStart + o.durationMs - TAIL_MS,
      allowances: clockAllowances,
      signal: o.signal,
    }) ?? Promise.resolve();
  // One fault at a time, in schedule order.
  let lastEnd = loadStart;
  // A late fault still gets its whole window before the next one begins, so effects never overlap.
  let notBefore = loadStart;
  // Late starts are bounded: a fault not begun by 1.5 × the duration is skipped (and reported).
  const startBy = loadStart + o.durationMs * 1.5 - TAIL_MS;
  for (const f of schedule.faults) {
    if (o.signal.aborted) break;
    if (Date.now() > startBy) {
      skipped.push(f);
      continue;
    }
    const began = await runFault(f, notBefore).catch((e: unknown) => {
      o.say(`  fault #${f.index} ${f.kind} failed to run: ${e instanceof Error ? e.message : String(e)}`);
      return Date.now();
    });
    notBefore = began + f.windowMs;
    lastEnd = Date.now();
  }
  // The load runs its duration, and at least the tail after a fault that started late.
  await sleep(Math.max(loadStart + o.durationMs, lastEnd + TAIL_MS) - Date.now(), o.signal);
  await new Promise<void>((resolve) => probeOut.end(resolve));
  await embeddedFaults.catch((e: unknown) =>
    o.say(`  embedded faults stopped: ${e instanceof Error ? e.message : String(e)}`),
  );
  if (o.signal.aborted) throw new Error('interrupted');
  const loadMs = Date.now() - loadStart;

  o.say('stopping callers');
  const callerSummaries = await Promise.all(
    callers.map(async (c) => {
      await c.stop(15_000);
      const line = c.stdoutLines.find((l) => l.includes('caller stopped'));
      return line === undefined
        ? undefined
        : (JSON.parse(line) as { index: number; calls: number; ids: number; failed: number });
    }),
  );
  clearInterval(scrapeTimer);
  await fleet.scrapeAll(); // the final scrape: every running node's counters (docs/design.md §2)
  if (embedded !== undefined) {
    o.say('stopping embedded callers');
    await embedded.stopAll(15_000);
  }
  o.say('stopping nodes');
  await fleet.stopAll(10_000);
  // Everything that minted has stopped: the audit judges what the run's etcd holds, before it is torn down.
  o.say("idgen audit of the run's etcd");
  const audit = await auditRun(o, dir, cluster);
  for (const l of audit.lines) o.say(`  ${l}`);
  o.say('stopping etcd');
  await cluster.stopAll();

  o.say('verifying');
  return verify(o, {
    schedule,
    loadStart,
    loadMs,
    dir,
    records,
    skipped,
    fleet,
    embedded,
    callerSummaries,
    clockAllowances,
    memberDowns,
    audit,
  });
}

/** The key prefix the run's nodes and embedded callers use (the servers' default; bindRegion's). */
const ETCD_PREFIX = '/idgen';

/**
 * `idgen audit` over the run's etcd: one region, the nodes' and the embedded callers' (both `o.region`). A CLI that
 * cannot be run is a failed audit, not a crash: the report says why.
 */
async function auditRun(o: ChaosOptions, dir: string, cluster: EtcdCluster): Promise<AuditOutcome> {
  if (!existsSync(o.cliMain))
    return {
      exitCode: null,
      ok: false,
      lines: [
        `idgen audit: ${o.cliMain} is missing: build the CLI (npx nx run @idgen/cli:build; npm run chaos builds it)`,
      ],
    };
  return runAudit({
    cliMain: o.cliMain,
    dir,
    regions: [{ name: `region-${o.region}`, etcd: cluster.endpoints, prefix: ETCD_PREFIX }],
    timeoutMs: 5000,
  });
}

async function verify(
  o: ChaosOptions,
  s: {
    schedule: Schedule;
    loadStart: number;
    loadMs: number;
    dir: string;
    records: FaultRecord[];
    skipped: Fault[];
    fleet: NodeFleet;
    embedded: EmbeddedFleet | undefined;
    callerSummaries: ({ index: number; calls: number; ids: number; failed: number } | undefined)[];
    clockAllowances: readonly ClockAllowance[];
    memberDowns: ReadonlyMap<FaultRecord, { fromMs: number; toMs: number }>;
    audit: AuditOutcome;
  },
): Promise<ChaosResult> {
  const all = await Promise.all(Array.from({ length: o.callers }, (_, i) => readCallerRecords(s.dir, i)));
  const probeBlocks = await readBlocksFile(probeBlocksFile(s.dir), -1);
  // Every ID the embedded callers minted is checked with the nodes' (rules 1-3).
  const embeddedBlocks = (await s.embedded?.blocks()) ?? [];
  const blocks: ReceivedBlock[] = [...all.flatMap((c) => c.blocks), ...probeBlocks, ...embeddedBlocks];

  // Rule 1 over every ID a node handed to any caller, and over every ID the clients handed out.
  const receivedIds = expandBlocks(blocks);
  const duplicates = findDuplicates(receivedIds); // sorts receivedIds
  let handedTotal = 0;
  for (const c of all) handedTotal += c.handedOut.length;
  const handedAll = new BigUint64Array(handedTotal);
  let at = 0;
  let invented = 0;
  let inventedChecked = 0;
  const inventedExamples: bigint[] = [];
  for (const c of all) {
    handedAll.set(c.handedOut, at);
    at += c.handedOut.length;
    const h = checkHandedOut(c.handedOut, c.blocks);
    invented += h.invented;
    inventedChecked += h.checked;
    inventedExamples.push(...h.examples);
  }
  const handedOutDuplicates = findDuplicates(handedAll);
  const handedOut: HandedOutReport = { checked: inventedChecked, invented, examples: inventedExamples.slice(0, 20) };

  // Rules 2 and 3.
  const holders = checkHolders(blocks, [...s.fleet.holdings, ...(s.embedded?.holdings ?? [])]);
  const clock = checkClockBound(blocks, CLOCK_BOUND_MS, undefined, s.clockAllowances);

  // Rule 4, per fault window (times relative to the load start).
  const windows: Window[] = [];
  // Windows from when each fault really began (a late start moves its window) to the next one.
  const ran = s.records;
  windows.push({ label: 'warm-up (no fault)', startMs: 0, endMs: ran[0]?.startedMs ?? s.loadMs });
  ran.forEach((r, i) => {
    const end = ran[i + 1]?.startedMs ?? s.loadMs;
    windows.push({
      label: `#${r.fault.index} ${r.fault.kind}`,
      startMs: r.startedMs,
      endMs: Math.max(end, r.startedMs + 1),
    });
  });
  const timelines = all.map((c) => ({
    caller: c.caller,
    successMs: Array.from(c.timeline.successMs, (t) => t - s.loadStart),
    failureMs: c.timeline.failureMs.map((t) => t - s.loadStart),
  }));
  const outages = outageWindows(timelines, windows, s.loadMs);
  const duplicatesByFault = duplicates.duplicates === 0 ? [] : duplicatesPerWindow(receivedIds, windows, s.loadStart);

  // Fence expectations, from the nodes' own log lines (one per fence, with its reason).
  const fenceEvents = s.fleet.fences;
  for (const r of s.records) {
    const from = s.loadStart + r.startedMs;
    const to = from + r.fault.effectMs;
    const inWindow = (lo: number, hi: number, reason?: string, name?: string): number =>
      fenceEvents.filter(
        (e) =>
          e.atMs >= lo &&
          e.atMs <= hi &&
          (reason === undefined || e.reason === reason) &&
          (name === undefined || e.name === name) &&
          e.source === 'guard',
      ).length;
    const next = s.records[s.records.indexOf(r) + 1];
    const nextStart = next === undefined ? s.loadStart + s.loadMs : s.loadStart + next.startedMs;
    const all = inWindow(from, nextStart);
    r.notes.push(`fences in window: ${all}`);
    switch (r.fault.kind) {
      case 'etcd-slow-short': {
        const n = inWindow(from, Math.min(to + 1500, nextStart), 'lease');
        if (n > 0)
          r.expectationMissed = `${n} lease fence(s) with etcd ${r.fault.latencyMs ?? 0} ms slower each way (inside the keep-alive timeout)`;
        break;
      }
      case 'etcd-slow-long': {
        const n = inWindow(from, Math.min(to + 1000, nextStart), 'lease');
        if (n === 0 && r.servingAtStart > 0)
          r.expectationMissed = `no lease fence with etcd ${r.fault.latencyMs ?? 0} ms slower each way (past the keep-alive timeout)`;
        break;
      }
      case 'etcd-pause-short': {
        const n = inWindow(from, Math.min(to + 1500, nextStart), 'lease');
        if (n > 0)
          r.expectationMissed = `${n} lease fence(s) during a ${r.fault.effectMs} ms etcd pause (shorter than the fence window)`;
        break;
      }
      case 'etcd-pause-long': {
        const n = inWindow(from, Math.min(to + 1000, nextStart), 'lease');
        // Only a node that was serving can fence; with none serving (still recovering) there is nothing to see.
        if (n === 0 && r.servingAtStart > 0)
          r.expectationMissed = `no lease fence during a ${r.fault.effectMs} ms etcd pause (longer than the TTL)`;
        break;
      }
      case 'clock-jump-small': {
        const n = inWindow(from, Math.min(to + 500, nextStart), 'clock-rollback', r.target);
        if (n > 0)
          r.expectationMissed = `${r.target} fenced on a ${(r.fault.clockOffsetSeconds ?? 0) * 1000} ms jump (within the 10 ms tolerance)`;
        break;
      }
      case 'clock-jump-large': {
        const n = inWindow(from, to, 'clock-rollback', r.target);
        if (n === 0 && r.target !== '-' && r.servingAtStart > 0)
          r.expectationMissed = `${r.target} did not fence on a ${r.fault.clockOffsetSeconds ?? 0} s jump back`;
        break;
      }
      case 'etcd-member-down': {
        const down = s.memberDowns.get(r);
        if (down === undefined) break;
        // A fence is read from the log a moment after it happens: 1.5 s past the member's start still counts.
        const leaseFences = inWindow(down.fromMs, Math.min(down.toMs + 1500, nextStart), 'lease');
        const failedCalls =
          outages.find((w) => w.window.label === `#${r.fault.index} ${r.fault.kind}`)?.failedCalls ?? 0;
        r.notes.push(`lease fences while down: ${leaseFences}; failed calls in window: ${failedCalls}`);
        r.expectationMissed = judgeMemberDown(leaseFences, failedCalls);
        break;
      }
      default:
        break;
    }
  }

  const perNodeMetrics = s.fleet.incarnations.map((i) => ({ name: i.name, metrics: i.metrics }));
  const metrics = sumNodeMetrics(perNodeMetrics.map((p) => p.metrics));
  const fencesByReason: Record<string, number> = {};
  for (const e of fenceEvents) if (e.source === 'guard') fencesByReason[e.reason] = (fencesByReason[e.reason] ?? 0) + 1;

  const violations =
    duplicates.duplicates +
    handedOutDuplicates.duplicates +
    handedOut.invented +
    holders.violationCount +
    clock.violationCount;
  return {
    seed: o.seed,
    kinds: o.kinds,
    serverMain: o.serverMain,
    serverMainFlag: o.serverMainFlag,
    durationMs: o.durationMs,
    clockAllowances: s.clockAllowances,
    schedule: s.schedule,
    loadMs: s.loadMs,
    dir: s.dir,
    faults: s.records,
    skipped: s.skipped,
    duplicates,
    duplicatesByFault,
    handedOutDuplicates,
    handedOut,
    holders,
    clock,
    outages,
    metrics,
    perNodeMetrics,
    fenceEvents: fenceEvents.length,
    fencesByReason,
    nodeProcesses: s.fleet.incarnations.length,
    supervisorRestarts: s.fleet.restarts(),
    spareRestarts: s.fleet.spareRestarts(),
    probeBlocks: probeBlocks.length,
    callersSummary: all.map((c, i) => ({
      caller: c.caller,
      calls: s.callerSummaries[i]?.calls ?? c.timeline.successMs.length,
      ids: c.handedOut.length,
      failed: c.failures.length,
      blocks: c.blocks.length,
    })),
    embedded:
      s.embedded === undefined
        ? undefined
        : {
            workers: s.embedded.workers,
            ...s.embedded.summary(),
            blocks: embeddedBlocks.length,
            ids: embeddedBlocks.reduce((n, b) => n + b.count, 0),
            faults: s.embedded.faults,
          },
    audit: s.audit,
    violations,
    expectationsMissed: s.records.filter((r) => r.expectationMissed !== undefined).length,
    safetyViolations: s.records.filter((r) => r.safetyViolation !== undefined).length,
  };
}

/** The chaos run's paths relative to the built `tools/chaos/dist/main.js`. */
export function defaultPaths(distDir: string): {
  serverMain: string;
  callerMain: string;
  embeddedMain: string;
  cliMain: string;
} {
  return {
    serverMain: join(distDir, '..', '..', '..', 'apps', 'server', 'dist', 'main.js'),
    cliMain: join(distDir, '..', '..', '..', 'apps', 'cli', 'dist', 'main.js'),
    callerMain: join(distDir, 'caller.js'),
    embeddedMain: join(distDir, 'embedded-caller.js'),
  };
}
