import { createEtcdClient, createEtcdLease, type ClockSource, type LeaseTarget, type WorkerLease } from '@idgen/lease';
import { initRegion, markRegionRestored } from '@idgen/lease/operator';
import { GuardedMinter } from '@idgen/clock-guard';
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { DEFAULT_LAYOUT, decodeId } from '@idgen/core';
import type { WorkerAssignment } from '@idgen/core';
import { EtcdModel, type ModelSnapshot } from './etcd-model.js';
import { SimNet, installSimNet, type LinkState, type NetRandom } from './sim-transport.js';
import { MintLog, askIds, guardTarget, leaseTimings, spinningClock } from './sim-node.js';

/**
 * One simulated deployment: a region's etcd model, nodes running the real `@idgen/lease` etcd lease and the real
 * `@idgen/clock-guard` guard (which wraps `@idgen/core`'s minter), embedded sources (the real `@idgen/embedded`, which
 * composes the same two inside a caller) sharing the nodes' slots, callers minting, an operator (the real
 * `initRegion` and `markRegionRestored` behind `idgen region init|restored`), and a schedule of faults. All on the
 * process's fake clock (`@sinonjs/fake-timers`, installed by the runner), so a seed replays exactly.
 *
 * The checker holds docs/design.md's invariant: no (region, worker, ms, sequence) minted twice; nothing minted
 * after the holder's etcd lease ended; nothing above the wall ceiling the lease last gave.
 */

/** A fault the schedule injects at a simulated second. */
export type Fault =
  /** A node cut off etcd: every member, or one (`member`: its requests then go to the others, and a write held in the
   * cut link lands late, after newer ones). */
  | { readonly kind: 'cut'; readonly node: number; readonly seconds: number; readonly member?: number }
  | { readonly kind: 'lose-answer'; readonly node: number }
  | { readonly kind: 'member-down'; readonly member: number; readonly seconds: number }
  /** A node's requests delayed `ms` on their way to etcd: every member, or one (`member`). */
  | {
      readonly kind: 'slow';
      readonly node: number;
      readonly ms: number;
      readonly seconds: number;
      readonly member?: number;
    }
  | { readonly kind: 'clock-step'; readonly node: number; readonly ms: number }
  | { readonly kind: 'pause'; readonly node: number; readonly seconds: number }
  | { readonly kind: 'snapshot' }
  /**
   * etcd restored from the last snapshot (same or new cluster ID), with or without the operator's `region restored`
   * (run with the scenario's `ttlSeconds`, the default TTL the runbook types; the real code raises it to the pinned
   * ceiling). `lost`: that node's host is lost in the disaster (issue 31's case 3): cut off etcd from the restore on
   * for 30 s, it keeps minting until its own lease deadline.
   */
  | { readonly kind: 'restore'; readonly newCluster: boolean; readonly operator: boolean; readonly lost?: number }
  /** A snapshot now and a restore from it `seconds` later (the second review's quick snapshot restore). */
  | {
      readonly kind: 'rewind';
      readonly seconds: number;
      readonly newCluster: boolean;
      readonly operator: boolean;
      readonly lost?: number;
    }
  | { readonly kind: 'crash'; readonly node: number }
  | { readonly kind: 'compact' }
  /**
   * The harness's own self-test, never drawn by the fault menu: the process stops making progress (an endless
   * microtask chain, as a mutated loop that never yields would), so the spec can show such a schedule is reported
   * `stuck`, not hung.
   */
  | { readonly kind: 'freeze' };

/** A fault at a moment of the run (simulated ms from its start). */
export interface TimedFault {
  readonly atMs: number;
  readonly fault: Fault;
}

/** What a run is. */
export interface Scenario {
  readonly nodes: number;
  /** Slots of the region the nodes share (fewer than nodes: spare nodes wait for a slot). */
  readonly workers: number;
  readonly members: number;
  /** The lease TTL of a node without its own in `nodeTtlSeconds`. */
  readonly ttlSeconds: number;
  /**
   * Each node's own lease TTL (node i runs `nodeTtlSeconds[i % length]`; a crashed node's replacement its new
   * index's): issue 31's case 3, a lost holder on a longer TTL than the restored records show. Default: all
   * `ttlSeconds`.
   */
  readonly nodeTtlSeconds?: readonly number[];
  /**
   * The deployment's TTL ceiling the operator pins with `initRegion` (`{prefix}/lease-ceiling`,
   * packages/lease/src/ttl-ceiling.ts): nodes refuse a TTL above it and every hold waits by it. Default: none pinned.
   */
  readonly ttlCeilingSeconds?: number;
  readonly durationMs: number;
  readonly faults: readonly TimedFault[];
  /** Probability in 1/1000 that any write's answer is lost after etcd applied it. */
  readonly lostAnswerPerMille: number;
  /**
   * Embedded sources (`createEmbeddedIdSource`) beside the nodes, claiming from the same slots; default none. A fault's
   * `node` counts the nodes first, then these (a crashed source's replacement is a source).
   */
  readonly embedded?: number;
}

/** A broken invariant. */
export interface Violation {
  /**
   * A broken invariant, or a schedule that did not end (`stuck`: no simulated progress within the wall bound) or
   * ended in an error of the harness (`error`); the last two are findings too, with their replay.
   */
  readonly kind: 'duplicate' | 'after-deadline' | 'after-lease' | 'above-ceiling' | 'stuck' | 'error';
  readonly message: string;
  readonly atMs: number;
}

/** What a run saw. */
export interface RunReport {
  readonly minted: number;
  readonly violations: readonly Violation[];
  readonly simulatedMs: number;
  readonly faults: number;
  readonly lostAnswers: number;
  /** Requests held in a cut link that reached etcd when it healed (sim-transport.ts). */
  readonly lateDeliveries: number;
  /** A hash (FNV-1a) of every slot taken: when, by which node, which worker. */
  readonly trace?: number;
  /** The run was cut off by the explorer's own deadline before its end (not a finding). */
  readonly unfinished?: boolean;
  /** Errors no code path handled during the run (unhandled rejections, throws in timers), in words. */
  readonly escapedErrors?: readonly string[];
}

/** The clock the runner advances; `@sinonjs/fake-timers`' `InstalledClock` fits. */
export interface Ticker {
  tickAsync(ms: number): Promise<number>;
  now: number;
}

const REGION = 1;
const CLUSTER = 'r1';
const PREFIX = '/idgen';
/** Callers' ask interval (simulated ms) while something just changed, and otherwise. */
const HOT_ASK_MS = 5;
const COLD_ASK_MS = 50;
/** How long a host lost in a restore's disaster stays cut off etcd (longer than any TTL the menu draws). */
const LOST_HOST_MS = 30_000;

/** What every simulated process has: its name on the network, its clocks, and whether it crashed. */
interface SimProc {
  readonly index: number;
  readonly proc: string;
  readonly clock: ClockSource & { wallOffset: number };
  crashed: boolean;
}

/** An embedded source in a caller's process: its guard and lease are its own (the checker reads its status). */
interface SimEmbedded extends SimProc {
  readonly source: EmbeddedIdSource;
}

interface SimNode extends SimProc {
  readonly guard: GuardedMinter;
  readonly lease: WorkerLease;
  ceiling: number;
  /** The monotonic deadline the lease last gave the guard. */
  deadline: number;
  assignment: WorkerAssignment | undefined;
}

/** FNV-1a over a string, continuing from `h`. */
function fnv(h: number, text: string): number {
  let x = h;
  for (let i = 0; i < text.length; i++) x = Math.imul(x ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return x;
}

/** A seeded generator (mulberry32): the network's delays and the runner's choices. */
export function seeded(seed: number): NetRandom & { next(): number } {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n: number) => Math.floor(next() * n) };
}

/** Moves simulated time until `p` settles (at most `limitMs` of it); its value, or undefined when time ran out. */
async function settle<T>(ticker: Ticker, p: Promise<T>, limitMs = 60_000): Promise<T | undefined> {
  let done = false;
  let value: T | undefined;
  let error: unknown;
  let failed = false;
  p.then(
    (v) => {
      done = true;
      value = v;
    },
    (e: unknown) => {
      done = true;
      failed = true;
      error = e;
    },
  );
  for (let t = 0; !done && t < limitMs; t += 10) await ticker.tickAsync(10);
  if (failed) throw error;
  return value;
}

/** Runs one scenario to its end on `ticker` and returns what the checker saw. */
export async function runScenario(s: Scenario, ticker: Ticker, seed: number): Promise<RunReport> {
  const random = seeded(seed);
  const net = new SimNet(random);
  net.lostAnswerPerMille = s.lostAnswerPerMille;
  const memberIds = Array.from({ length: s.members }, (_, i) => String(1000 + i));
  const model = new EtcdModel('14841639068965178418', memberIds);
  net.addCluster(CLUSTER, model, s.members);
  const uninstallNet = installSimNet(net);
  try {
    return await new DeploymentRun(s, ticker, net, model).run();
  } finally {
    uninstallNet();
    model.close();
  }
}

/** The operator's view of the region's etcd, as `idgen region init|restored` build it. */
interface OperatorIo {
  readonly client: ReturnType<typeof createEtcdClient>;
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly layout: typeof DEFAULT_LAYOUT;
}

/** An ID as the checker names it: region/worker/ms/sequence. */
function describeId(id: bigint): string {
  const f = decodeId(id);
  return `${f.region}/${f.worker}/${f.timestampMs}/${f.sequence}`;
}

/**
 * One run of a {@link Scenario}: the operator's setup, the nodes, the callers and their checker, the fault schedule
 * and the teardown. A seed replays a run only while every random draw and every timer comes in the same order, so
 * the methods keep the order of the steps exactly (a timer set earlier or later changes every later interleaving).
 */
class DeploymentRun {
  private readonly t0: number;
  /**
   * Callers ask every HOT_ASK_MS while something just changed (a fault, its end, a slot taken or lost, an answer
   * lost): the moments two holders can overlap, for the longest TTL plus a margin after it. Otherwise every
   * COLD_ASK_MS: a steady deployment needs sampling, not every millisecond (the callers' timer was most of the
   * simulator's timer work).
   */
  private readonly hotForMs: number;
  private hotUntil = -Infinity;
  /** A hash of every slot taken (when, by whom, which): two interleavings differ in it. */
  private trace = 0x811c9dc5;
  private askTimer: ReturnType<typeof setTimeout> | undefined;
  private asking = true;
  private readonly violations: Violation[] = [];
  private readonly ids = new MintLog<bigint>();
  private minted = 0;
  /** What a `restore` goes back to: the backup after `region init`, then the last `snapshot` fault's. */
  private snapshot: ModelSnapshot | undefined;
  private newClusters = 0;
  private readonly nodes: SimNode[] = [];
  private readonly embedded: SimEmbedded[] = [];
  private nextIndex: number;
  private readonly operatorClient: ReturnType<typeof createEtcdClient>;
  private readonly io: OperatorIo;

  constructor(
    private readonly s: Scenario,
    private readonly ticker: Ticker,
    private readonly net: SimNet,
    private readonly model: EtcdModel,
  ) {
    this.t0 = ticker.now;
    this.hotForMs = Math.max(s.ttlSeconds, ...(s.nodeTtlSeconds ?? []), s.ttlCeilingSeconds ?? 0) * 1000 + 5_000;
    this.nextIndex = s.nodes;
    this.operatorClient = createEtcdClient({
      endpoints: net.endpoints('op', CLUSTER),
      tls: undefined,
      auth: undefined,
    });
    this.io = { client: this.operatorClient, prefix: PREFIX, timeoutMs: 3000, layout: DEFAULT_LAYOUT };
  }

  async run(): Promise<RunReport> {
    await this.setup();
    const { elapsed, applied } = await this.runSchedule();
    await this.teardown();
    return {
      minted: this.minted,
      violations: this.violations,
      simulatedMs: elapsed,
      faults: applied,
      lostAnswers: this.net.lostAnswers,
      lateDeliveries: this.net.lateDeliveries,
      trace: this.trace,
    };
  }

  /** The operator's `region init` and backup, the nodes, and the callers' first ask. */
  private async setup(): Promise<void> {
    // `idgen region init`, re-run by the operator after a lost answer (it is idempotent), up to a few times.
    const pinned = this.s.ttlCeilingSeconds === undefined ? {} : { ttlCeilingSeconds: this.s.ttlCeilingSeconds };
    for (let attempt = 1; ; attempt++) {
      try {
        await settle(this.ticker, initRegion(this.io, REGION, pinned));
        break;
      } catch (e) {
        if (attempt >= 5) throw e;
      }
    }
    // The operator's backup right after `region init`: what a `restore` goes back to until a `snapshot` fault takes
    // a newer one (issue 31's case 3: a backup older than the tenure of the holder the disaster lost).
    this.snapshot = this.model.snapshot();
    for (let i = 0; i < this.s.nodes; i++) this.nodes.push(this.startNode(i));
    for (let i = 0; i < (this.s.embedded ?? 0); i++) this.embedded.push(this.startEmbedded(this.nextIndex++));
    this.askIn(0);
  }

  /** The faults at their moments, in steps of 50 simulated ms, until the end or the first violation. */
  private async runSchedule(): Promise<{ elapsed: number; applied: number }> {
    const faults = [...this.s.faults].sort((a, b) => a.atMs - b.atMs);
    let fi = 0;
    let elapsed = 0;
    const step = 50;
    let netEvents = 0;
    while (elapsed < this.s.durationMs && this.violations.length === 0) {
      while (fi < faults.length && (faults[fi] as TimedFault).atMs <= elapsed) {
        this.heat();
        await this.applyFault((faults[fi++] as TimedFault).fault);
      }
      // A lost answer or a late write: the callers hot, so a duplicate it makes shows.
      if (this.net.lostAnswers + this.net.lateDeliveries !== netEvents) {
        netEvents = this.net.lostAnswers + this.net.lateDeliveries;
        this.heat();
      }
      await this.ticker.tickAsync(step);
      elapsed += step;
    }
    return { elapsed, applied: fi };
  }

  /** The callers stop, every live node releases its slot, the guards and the operator's client close. */
  private async teardown(): Promise<void> {
    this.asking = false;
    this.askIn(0);
    const settleQuietly = (p: Promise<unknown>): Promise<unknown> =>
      settle(
        this.ticker,
        p.catch(() => undefined),
        10_000,
      );
    for (const n of this.nodes) if (!n.crashed) await settleQuietly(n.lease.release());
    for (const n of this.nodes) n.guard.close();
    // A source's close releases its slot and ends its guard (bounded, as every close is).
    for (const e of this.embedded) if (!e.crashed) await settleQuietly(e.source.close());
    this.operatorClient.close();
  }

  /** Node `index`'s own lease TTL (`nodeTtlSeconds` cycled), else the scenario's. */
  private ttlOf(index: number): number {
    return this.s.nodeTtlSeconds?.[index % this.s.nodeTtlSeconds.length] ?? this.s.ttlSeconds;
  }

  /** Node `index`: the real guard, driven by the real etcd lease, on its own clocks; its lease started. */
  private startNode(index: number): SimNode {
    const proc = `n${index}`;
    const clock = spinningClock();
    const guard = new GuardedMinter({ region: REGION, clock, checkIntervalMs: 250 });
    const node: SimNode = {
      index,
      proc,
      clock,
      guard,
      lease: undefined as unknown as WorkerLease,
      ceiling: -Infinity,
      deadline: -Infinity,
      assignment: undefined,
      crashed: false,
    };
    const lease = createEtcdLease(
      {
        endpoints: this.net.endpoints(proc, CLUSTER),
        region: REGION,
        nodeId: proc,
        workers: { first: 0, last: this.s.workers - 1 },
        waitForFreeSlot: true,
        ...leaseTimings(this.ttlOf(index)),
        clock,
      },
      this.leaseTarget(node),
    );
    (node as { lease: WorkerLease }).lease = lease;
    lease.start().catch(() => undefined);
    return node;
  }

  /**
   * An embedded source `index` (process `e<index>`) on its own clocks, as a caller configures it: the region's etcd,
   * the nodes' slots, the node's lease timings for its TTL, no time-source check (the simulated clocks have none), and
   * a start that waits for a free slot as long as the run lasts.
   */
  private startEmbedded(index: number): SimEmbedded {
    const proc = `e${index}`;
    const clock = spinningClock();
    const source = createEmbeddedIdSource({
      etcd: { endpoints: this.net.endpoints(proc, CLUSTER) },
      region: REGION,
      workers: { first: 0, last: this.s.workers - 1 },
      nodeId: proc,
      ...leaseTimings(this.ttlOf(index)),
      timeSource: 'none',
      slotWaitMs: 24 * 3_600_000,
      clock,
    });
    source.ready().catch(() => undefined);
    return { index, proc, clock, source, crashed: false };
  }

  /** The lease drives the real guard; the callers ask hot while a slot is taken or lost, and the trace hashes it. */
  private leaseTarget(node: SimNode): LeaseTarget {
    return guardTarget(node, node.guard, {
      assigned: (a) => {
        this.heat();
        this.trace = fnv(this.trace, `${this.ticker.now - this.t0}:${node.proc}:${a.worker}`);
        node.assignment = a;
      },
      unassigned: () => {
        this.heat();
        node.assignment = undefined;
      },
    });
  }

  /** The callers' next ask in `ms` (none once they stopped asking). */
  private askIn(ms: number): void {
    if (this.askTimer !== undefined) clearTimeout(this.askTimer);
    this.askTimer = this.asking ? setTimeout(() => this.onAsk(), ms) : undefined;
  }

  private onAsk(): void {
    this.askTimer = undefined;
    this.mintTick();
    this.askIn(this.ticker.now - this.t0 < this.hotUntil ? HOT_ASK_MS : COLD_ASK_MS);
  }

  /** Something changed: callers ask every HOT_ASK_MS for the next `hotForMs`. */
  private heat(): void {
    const cold = this.ticker.now - this.t0 >= this.hotUntil;
    this.hotUntil = this.ticker.now - this.t0 + this.hotForMs;
    // At once, not at the next cold ask: a clock step is visible only until the guard's own check.
    if (cold) this.askIn(0);
  }

  /**
   * One ask of the callers: every node is asked for three IDs. One ask is one synchronous moment (the node's clocks
   * do not move within it), so the deadline, lease and ceiling checks are made once per ask, on its highest ID; the
   * duplicate check on every ID, keyed by the ID itself (it is region, worker, ms and sequence).
   */
  private mintTick(): void {
    const atMs = this.ticker.now - this.t0;
    for (const n of this.nodes) {
      if (n.crashed || this.net.isPaused(n.proc)) continue;
      let last: bigint | undefined;
      askIds(n.guard, 3, (id) => {
        this.minted++;
        last = id;
        const duplicate = this.ids.duplicate(id, n.proc, describeId);
        if (duplicate !== undefined) this.violations.push({ kind: 'duplicate', atMs, message: duplicate });
      });
      if (last !== undefined) this.check(n, last, atMs);
    }
    for (const e of this.embedded) {
      if (e.crashed || this.net.isPaused(e.proc)) continue;
      for (let k = 0; k < 3; k++) {
        const id = e.source.tryNextId();
        if (id === undefined) break;
        this.minted++;
        const duplicate = this.ids.duplicate(id, e.proc, describeId);
        if (duplicate !== undefined) this.violations.push({ kind: 'duplicate', atMs, message: duplicate });
        if (k === 2) this.checkLease(e.proc, e.source.status().lease.leaseId, id, atMs);
      }
    }
  }

  /** The per-holder checks of an ask's highest ID: within the wall ceiling, before the deadline, on a live lease. */
  private check(n: SimNode, id: bigint, atMs: number): void {
    // The ceiling is Unix ms; the ID's timestamp field counts from the layout's epoch.
    const unixMs = DEFAULT_LAYOUT.unixMsOf(id);
    if (unixMs > n.ceiling)
      this.violations.push({
        kind: 'above-ceiling',
        atMs,
        message: `${n.proc} minted ${describeId(id)} at Unix ms ${unixMs}, above its wall ceiling ${n.ceiling}`,
      });
    const mono = n.clock.monoMs();
    if (mono >= n.deadline)
      this.violations.push({
        kind: 'after-deadline',
        atMs,
        message: `${n.proc} minted ${describeId(id)} after its holder's deadline (${n.deadline - mono} ms)`,
      });
    this.checkLease(n.proc, n.lease.snapshot().leaseId, id, atMs);
  }

  /** Nothing minted on a lease etcd ended (a source's ceiling and deadline are its guard's, which the nodes prove). */
  private checkLease(proc: string, leaseId: string | undefined, id: bigint, atMs: number): void {
    if (leaseId !== undefined && this.model.leaseEnded(leaseId))
      this.violations.push({
        kind: 'after-lease',
        atMs,
        message: `${proc} minted ${describeId(id)} after etcd ended its lease ${leaseId}`,
      });
  }

  /** Undoes a fault after `ms`, the callers hot again from that moment. */
  private undoAfter(ms: number, undo: () => void): void {
    setTimeout(() => {
      this.heat();
      undo();
    }, ms);
  }

  /** `proc`'s link to every member (or to `member`) is `state` for `seconds`, then answers again. */
  private linkFor(proc: SimProc, state: LinkState, seconds: number, member: number | undefined): void {
    const m = member === undefined ? undefined : member % this.s.members;
    this.net.setLink(proc.proc, CLUSTER, state, m);
    this.undoAfter(seconds * 1000, () => this.net.setLink(proc.proc, CLUSTER, { kind: 'ok' }, m));
  }

  /** Injects one fault of the schedule. */
  private async applyFault(f: Fault): Promise<void> {
    const all: SimProc[] = [...this.nodes, ...this.embedded];
    const node = 'node' in f ? all[f.node % all.length] : undefined;
    switch (f.kind) {
      case 'cut':
        if (node !== undefined) this.linkFor(node, { kind: 'cut' }, f.seconds, f.member);
        return;
      case 'lose-answer':
        if (node !== undefined) this.net.loseNextWriteAnswer(node.proc);
        return;
      case 'member-down':
        this.net.setMemberDown(CLUSTER, f.member % this.s.members, true);
        this.undoAfter(f.seconds * 1000, () => this.net.setMemberDown(CLUSTER, f.member % this.s.members, false));
        return;
      case 'slow':
        if (node !== undefined) this.linkFor(node, { kind: 'slow', ms: f.ms }, f.seconds, f.member);
        return;
      case 'clock-step':
        if (node !== undefined) node.clock.wallOffset += f.ms;
        return;
      case 'pause':
        if (node === undefined) return;
        this.net.pause(node.proc);
        this.undoAfter(f.seconds * 1000, () => this.net.resume(node.proc));
        return;
      case 'snapshot':
        this.snapshot = this.model.snapshot();
        return;
      case 'rewind':
        return this.rewind(f);
      case 'restore':
        return this.restore(f);
      case 'crash':
        return this.crash(node);
      case 'compact':
        return this.compact();
      case 'freeze':
        return new Promise<void>(() => {
          const spin = (): void => queueMicrotask(spin);
          spin();
        });
    }
  }

  /** A snapshot now and a restore from it `seconds` later: the quick snapshot restore of the second review. */
  private rewind(f: Extract<Fault, { kind: 'rewind' }>): void {
    const taken = this.model.snapshot();
    setTimeout(() => {
      this.snapshot = taken;
      void this.applyFault({
        kind: 'restore',
        newCluster: f.newCluster,
        operator: f.operator,
        ...(f.lost === undefined ? {} : { lost: f.lost }),
      });
    }, f.seconds * 1000);
  }

  /** etcd restored from the last snapshot; a host lost with it; the operator's `region restored` if the fault says. */
  private restore(f: Extract<Fault, { kind: 'restore' }>): void {
    if (this.snapshot === undefined) return;
    const newClusterId = f.newCluster ? String(20_000_000_000_000_000n + BigInt(++this.newClusters)) : undefined;
    this.model.restore(this.snapshot, newClusterId);
    this.net.restarted(CLUSTER);
    if (f.lost !== undefined) {
      // The host lost is one holding a slot (losing a spare is a crash): the f.lost-th holder, or any node.
      const holders = this.nodes.filter((n) => !n.crashed && n.assignment !== undefined);
      const pool = holders.length > 0 ? holders : this.nodes;
      const lost = pool[f.lost % pool.length] as SimNode;
      this.net.setLink(lost.proc, CLUSTER, { kind: 'cut' });
      this.undoAfter(LOST_HOST_MS, () => this.net.setLink(lost.proc, CLUSTER, { kind: 'ok' }));
    }
    // The runbook: after a restore, `idgen region restored` before nodes are trusted again. It is told the default
    // TTL (the runbook's DR path); the real code raises it to the pinned ceiling.
    if (f.operator)
      void markRegionRestored(this.io, REGION, { ttlMs: this.s.ttlSeconds * 1000 }).catch(() => undefined);
  }

  /** The process is gone: it mints nothing more and never speaks to etcd again; a new process takes its place. */
  private crash(proc: SimProc | undefined): void {
    if (proc === undefined || proc.crashed) return;
    proc.crashed = true;
    this.net.setLink(proc.proc, CLUSTER, { kind: 'cut' });
    const e = this.embedded.indexOf(proc as SimEmbedded);
    if (e >= 0) this.embedded[e] = this.startEmbedded(this.nextIndex++);
    else this.nodes[this.nodes.indexOf(proc as SimNode)] = this.startNode(this.nextIndex++);
  }

  /**
   * An operator's compaction at the current revision; etcd refuses one at or below the last (nothing new was written
   * since), which the operator would see and shrug off.
   */
  private compact(): void {
    try {
      this.model.compact({ revision: String(this.model.currentRevision) });
    } catch {
      // refused: already compacted at this revision
    }
  }
}
