import { createEtcdLease, type ClockSource, type WorkerLease } from '@idgen/lease';
import type { TenureWitness, TenureWitnessEntry, TenureWitnessRecord } from '@idgen/lease';
import { auditDeployment, regionViewOf, type EtcdKeyValue, type Finding } from '@idgen/lease/records';
import { GuardedMinter } from '@idgen/clock-guard';
import { decodeId } from '@idgen/core';
import type { EtcdModel } from './etcd-model.js';
import { Clusters } from './clusters.js';
import { SimNet, installSimNet } from './sim-transport.js';
import { MintLog, askIds, guardTarget, leaseTimings, spinningClock } from './sim-node.js';

import { seeded, type Ticker } from './deployment.js';
import { RegistryOperator, SIM_LAYOUT, type OperatorStep, type StepOutcome } from './registry-ops.js';

/**
 * A whole deployment on the simulated clock (issue 32 item 3, issue 31's threats): 2-5 regions, each with its own etcd
 * cluster (own cluster ID) bound to its code 0…4, the spare-code registry's etcd (and a second registry an operator
 * under pressure may name), an etcd per spare code 5/6 that an adoption binds, nodes per region running the real lease
 * (embedded holders that borrow a lent spare code once their home range is full, confirming each loan in the
 * registry), an operator running the real operator functions behind `idgen region|spare` (./registry-ops.ts) in the
 * schedule's order with its arguments (sometimes wrong), snapshots and restores of any etcd, and partitions between any
 * process (a node or the operator) and any etcd.
 *
 * The checker: no (region code, worker, ms, sequence) minted twice across every region; the per-holder checks of
 * ./deployment.ts (after the deadline, after etcd ended the lease, above the wall ceiling); and the audit's soundness
 * at the end (`auditDeployment` of `@idgen/lease/records` over every simulated etcd's records and the holders' tenure
 * journals): every overlap the simulator saw is reported, and no overlap is reported that the simulator did not see.
 */

/**
 * A cluster as a schedule names it (./regions.ts `Clusters.resolve`): 0-99 a region code's cluster now, 100 the
 * registry, 101 the second registry, 105/106 the spare codes' adopters, 200 + i any cluster by index.
 */
export type ClusterRef = number;

/** One event of a deployment's schedule: a fault or an operator's step. */
export type RegionsEvent =
  | { readonly kind: 'cut'; readonly proc: number; readonly cluster: number; readonly seconds: number }
  | { readonly kind: 'cut-op'; readonly cluster: number; readonly seconds: number }
  /** Every node of a region cut off its etcd (0) or the registry (1): a split between a site and the rest. */
  | { readonly kind: 'cut-region'; readonly region: number; readonly cluster: number; readonly seconds: number }
  | { readonly kind: 'lose-answer'; readonly proc: number }
  | { readonly kind: 'clock-step'; readonly proc: number; readonly ms: number }
  | { readonly kind: 'pause'; readonly proc: number; readonly seconds: number }
  | { readonly kind: 'crash'; readonly proc: number }
  | { readonly kind: 'wrong-node'; readonly region: number; readonly code: number }
  /**
   * A borrower of a region started naming registry 0 (the deployment's) or 1 (the second: an operator cut off the
   * first during a split points a site's new nodes at the one it initialised, issue 31 case 5).
   */
  | { readonly kind: 'borrower'; readonly region: number; readonly registry: number }
  | OperatorStep;

/** An event at a moment of the run (simulated ms from its start). */
export interface TimedRegionsEvent {
  readonly atMs: number;
  readonly event: RegionsEvent;
}

/** What a deployment run is. */
export interface RegionsScenario {
  /** Regions with codes 0 … regions-1, each its own etcd cluster. */
  readonly regions: number;
  /** Slots per region (worker 0 … workers-1), the same range under a borrowed spare code. */
  readonly workers: number;
  /** Nodes per region beyond its slots: they wait, and borrow a lent spare code. */
  readonly extraNodes: number;
  /** Each node's lease TTL (cycled), all within the deployment's TTL ceiling of 6 s. */
  readonly ttls: readonly number[];
  readonly durationMs: number;
  readonly lostAnswerPerMille: number;
  readonly events: readonly TimedRegionsEvent[];
}

/** A broken invariant or an unsound audit. */
export interface RegionsViolation {
  readonly kind:
    'duplicate' | 'after-deadline' | 'after-lease' | 'above-ceiling' | 'audit-missed' | 'audit-false-alarm';
  readonly message: string;
  readonly atMs: number;
}

/** What a deployment run saw. */
export interface RegionsReport {
  readonly minted: number;
  /** IDs minted per region code (a spare code's count shows borrowers and adopters ran). */
  readonly mintedByCode: Readonly<Record<number, number>>;
  readonly violations: readonly RegionsViolation[];
  readonly simulatedMs: number;
  readonly faults: number;
  readonly lostAnswers: number;
  /** Requests held in a cut link that reached etcd when it healed (sim-transport.ts). */
  readonly lateDeliveries: number;
  /** Each operator step's outcome, in order: accepted, or refused with its one line. */
  readonly steps: readonly StepOutcome[];
  /** The audit's findings at the end, by kind. */
  readonly auditFindings: Readonly<Record<string, number>>;
  /** Per slot (`code/worker`), every holder that minted on it and the ms it minted from and to. */
  readonly holders: Readonly<Record<string, readonly string[]>>;
  /** Every finding of the audit, in words (kind: message). */
  readonly auditLines: readonly string[];
  readonly escapedErrors?: readonly string[];
}

/** How a run checks. */
export interface RegionsOptions {
  /**
   * Judge the audit's soundness at the end (default true): off, a run reports only what was minted (the mutants'
   * runs, whose hole is a duplicate, not an audit's precision).
   */
  readonly audit?: boolean;
}

/** The key prefix every etcd of the deployment uses. */
export const PREFIX = '/idgen';
/** The deployment's TTL ceiling (`idgen region init`'s default). */
export const TTL_CEILING_SECONDS = 6;

interface RegionNode {
  readonly proc: string;
  readonly cluster: string;
  readonly code: number;
  readonly clock: ClockSource & { wallOffset: number };
  readonly guard: GuardedMinter;
  lease: WorkerLease;
  ceiling: number;
  deadline: number;
  crashed: boolean;
}

/** A tenure journal kept on a simulated disk outside every etcd (it survives restores and crashes). */
class Journal {
  readonly records = new Map<string, TenureWitnessRecord>();

  forNode(proc: string): TenureWitness {
    const key = (r: TenureWitnessRecord): string =>
      `${proc}/${r.tenure.code}-${r.tenure.worker}-${r.tenure.leaseId}.json`;
    return {
      opened: (r) => {
        this.records.set(key(r), r);
        return Promise.resolve();
      },
      refreshed: (r) => {
        this.records.set(key(r), r);
      },
      closed: (r) => {
        this.records.set(key(r), r);
        return Promise.resolve();
      },
    };
  }

  entries(): TenureWitnessEntry[] {
    return [...this.records].map(([source, record]) => ({ source, record }));
  }
}

/** Runs a deployment's schedule to its end on `ticker` and returns what the checker saw. */
export async function runRegionsScenario(
  s: RegionsScenario,
  ticker: Ticker,
  seed: number,
  o: RegionsOptions = {},
): Promise<RegionsReport> {
  const random = seeded(seed);
  const net = new SimNet(random);
  net.lostAnswerPerMille = s.lostAnswerPerMille;
  const clusters = new Clusters(net, 1, s.regions);
  for (let code = 0; code < s.regions; code++) {
    clusters.add(`r${code}`);
    clusters.current.set(code, `r${code}`);
  }
  clusters.add('reg');
  // The second registry: some other etcd an operator cut off from the first may name, with its own history, longer
  // than the first's in a minute (so a region's memory of the first's revision does not refuse it: only its identity).
  const other = clusters.add('reg2');
  for (let i = 0; i < 3000; i++) other.put({ key: Buffer.from('/other/app'), value: Buffer.from(String(i)) });
  clusters.add('x5');
  clusters.add('x6');
  const uninstall = installSimNet(net);
  try {
    return await new RegionsRun(s, ticker, net, clusters, o.audit ?? true).run();
  } finally {
    uninstall();
    clusters.close();
  }
}

/** One run of a {@link RegionsScenario}: the nodes, the callers, the operator, the checker. */
class RegionsRun {
  private readonly violations: RegionsViolation[] = [];
  private readonly ids = new MintLog<string>();
  /** Per slot (`code/worker`), per holder (`proc lease`): the lowest and highest ms it minted in. */
  private readonly holders = new Map<string, Map<string, { from: number; to: number }>>();
  private readonly nodes: RegionNode[] = [];
  private readonly journal = new Journal();
  private readonly operator: RegistryOperator;
  private minted = 0;
  private auditLines: readonly string[] = [];
  private readonly mintedByCode: Record<number, number> = {};
  private nextIndex = 0;
  private readonly t0: number;

  constructor(
    private readonly s: RegionsScenario,
    private readonly ticker: Ticker,
    private readonly net: SimNet,
    private readonly clusters: Clusters,
    private readonly auditSoundness: boolean,
  ) {
    this.t0 = ticker.now;
    this.operator = new RegistryOperator(net, clusters, {
      regions: s.regions,
      workers: s.workers,
      startNodes: (code, cluster, count, wholeCode) => {
        for (let i = 0; i < count; i++) this.nodes.push(this.startNode(cluster, code, wholeCode));
      },
    });
  }

  async run(): Promise<RegionsReport> {
    // The deployment's setup, as the runbook has it: every region's etcd bound (with the TTL ceiling), the registry
    // initialised and recorded in every region (`idgen spare init`).
    await this.settle(this.operator.setup());
    for (let code = 0; code < this.s.regions; code++)
      for (let i = 0; i < this.s.workers + this.s.extraNodes; i++) this.nodes.push(this.startNode(`r${code}`, code));
    const minting = setInterval(() => this.mintTick(), 10);
    const events = [...this.s.events].sort((a, b) => a.atMs - b.atMs);
    let ei = 0;
    let elapsed = 0;
    const step = 50;
    while (elapsed < this.s.durationMs && this.violations.length === 0) {
      while (ei < events.length && (events[ei] as TimedRegionsEvent).atMs <= elapsed)
        this.apply((events[ei++] as TimedRegionsEvent).event);
      await this.ticker.tickAsync(step);
      elapsed += step;
    }
    clearInterval(minting);
    for (const n of this.nodes)
      if (!n.crashed)
        await this.settle(
          n.lease.release().catch(() => undefined),
          10_000,
        );
    for (const n of this.nodes) n.guard.close();
    await this.settle(this.operator.idle(), 30_000);
    const auditFindings = this.audit(elapsed, this.auditSoundness && this.violations.length === 0);
    this.operator.close();
    return {
      minted: this.minted,
      mintedByCode: this.mintedByCode,
      violations: this.violations,
      simulatedMs: elapsed,
      faults: ei,
      lostAnswers: this.net.lostAnswers,
      lateDeliveries: this.net.lateDeliveries,
      steps: this.operator.outcomes,
      auditFindings,
      auditLines: this.auditLines,
      holders: Object.fromEntries(
        [...this.holders].map(([slot, m]) => [slot, [...m].map(([h, sp]) => `${h} ${sp.from}…${sp.to}`)]),
      ),
    };
  }

  /** Moves simulated time until `p` settles (at most `limitMs`). */
  private async settle<T>(p: Promise<T>, limitMs = 60_000): Promise<void> {
    let done = false;
    p.then(
      () => (done = true),
      () => (done = true),
    );
    for (let t = 0; !done && t < limitMs; t += 10) await this.ticker.tickAsync(10);
  }

  /**
   * A node on `cluster` with region `code`: on the region's slots, or (`wholeCode`) on any worker of the code; it
   * confirms its loans in `registry` (the cluster's name).
   */
  private startNode(cluster: string, code: number, wholeCode = false, registry = 'reg'): RegionNode {
    const index = this.nextIndex++;
    const proc = `n${index}`;
    const ttl = this.s.ttls[index % this.s.ttls.length] ?? TTL_CEILING_SECONDS;
    // A busy-wait on the clock (the guard waits out a small rollback that way) moves it on, as it would really.
    const clock = spinningClock();
    const guard = new GuardedMinter({ region: code, clock, checkIntervalMs: 250, layout: SIM_LAYOUT });
    const node: RegionNode = {
      proc,
      cluster,
      code,
      clock,
      guard,
      lease: undefined as unknown as WorkerLease,
      ceiling: -Infinity,
      deadline: -Infinity,
      crashed: false,
    };
    node.lease = createEtcdLease(
      {
        endpoints: this.net.endpoints(proc, cluster),
        region: code,
        nodeId: proc,
        kind: 'embedded',
        borrowSpare: true,
        registry: { endpoints: this.net.endpoints(proc, registry) },
        workers: { first: 0, last: wholeCode ? SIM_LAYOUT.maxWorker : this.s.workers - 1 },
        waitForFreeSlot: true,
        ...leaseTimings(ttl),
        clock,
        layout: SIM_LAYOUT,
        tenureWitness: this.journal.forNode(proc),
      },
      guardTarget(node, guard),
    );
    node.lease.start().catch(() => undefined);
    return node;
  }

  private mintTick(): void {
    const atMs = this.ticker.now - this.t0;
    for (const n of this.nodes) {
      if (n.crashed || this.net.isPaused(n.proc)) continue;
      askIds(n.guard, 2, (id) => {
        this.minted++;
        const f = decodeId(id, SIM_LAYOUT);
        // The unix ms the audit speaks in (the ID carries ms since the layout's epoch).
        const ms = f.timestampMs + SIM_LAYOUT.epochMs;
        this.mintedByCode[f.region] = (this.mintedByCode[f.region] ?? 0) + 1;
        const slot = `${f.region}/${f.worker}`;
        const key = `${slot}/${f.timestampMs}/${f.sequence}`;
        const leaseId = n.lease.snapshot().leaseId ?? '?';
        const holder = `${n.proc} lease ${leaseId}`;
        const duplicate = this.ids.duplicate(key, holder, (k) => k);
        if (duplicate !== undefined) this.violations.push({ kind: 'duplicate', atMs, message: duplicate });
        const bySlot = this.holders.get(slot) ?? new Map<string, { from: number; to: number }>();
        this.holders.set(slot, bySlot);
        const span = bySlot.get(holder);
        if (span === undefined) bySlot.set(holder, { from: ms, to: ms });
        else span.to = Math.max(span.to, ms);
        if (ms > n.ceiling)
          // both Unix ms (the ceiling is the guard's, on the node's wall clock)
          this.violations.push({
            kind: 'above-ceiling',
            atMs,
            message: `${n.proc} minted ${key} above its wall ceiling ${n.ceiling}`,
          });
        if (n.clock.monoMs() >= n.deadline)
          this.violations.push({
            kind: 'after-deadline',
            atMs,
            message: `${n.proc} minted ${key} after its holder's deadline (${n.deadline - n.clock.monoMs()} ms)`,
          });
        if (leaseId !== '?' && this.clusters.model(n.cluster).leaseEnded(leaseId))
          this.violations.push({
            kind: 'after-lease',
            atMs,
            message: `${n.proc} minted ${key} after etcd ${n.cluster} ended its lease ${leaseId}`,
          });
      });
    }
  }

  private node(i: number): RegionNode | undefined {
    return this.nodes.length === 0 ? undefined : this.nodes[i % this.nodes.length];
  }

  private apply(e: RegionsEvent): void {
    switch (e.kind) {
      case 'cut': {
        const n = this.node(e.proc);
        if (n === undefined) return;
        const cluster = e.cluster % 2 === 0 ? n.cluster : 'reg';
        this.net.setLink(n.proc, cluster, { kind: 'cut' });
        setTimeout(() => this.net.setLink(n.proc, cluster, { kind: 'ok' }), e.seconds * 1000);
        return;
      }
      case 'cut-region': {
        const home = this.clusters.current.get(e.region % this.s.regions);
        for (const n of this.nodes) {
          if (n.cluster !== home || n.crashed) continue;
          const cluster = e.cluster % 2 === 0 ? n.cluster : 'reg';
          this.net.setLink(n.proc, cluster, { kind: 'cut' });
          setTimeout(() => this.net.setLink(n.proc, cluster, { kind: 'ok' }), e.seconds * 1000);
        }
        return;
      }
      case 'cut-op': {
        const cluster = this.clusters.resolve(e.cluster);
        this.net.setLink('op', cluster, { kind: 'cut' });
        setTimeout(() => this.net.setLink('op', cluster, { kind: 'ok' }), e.seconds * 1000);
        return;
      }
      case 'lose-answer': {
        const n = this.node(e.proc);
        if (n !== undefined) this.net.loseNextWriteAnswer(n.proc);
        return;
      }
      case 'clock-step': {
        const n = this.node(e.proc);
        if (n !== undefined) n.clock.wallOffset += e.ms;
        return;
      }
      case 'pause': {
        const n = this.node(e.proc);
        if (n === undefined) return;
        this.net.pause(n.proc);
        setTimeout(() => this.net.resume(n.proc), e.seconds * 1000);
        return;
      }
      case 'crash': {
        const n = this.node(e.proc);
        if (n === undefined || n.crashed) return;
        n.crashed = true;
        for (const c of this.clusters.models.keys()) this.net.setLink(n.proc, c, { kind: 'cut' });
        this.nodes.push(this.startNode(n.cluster, n.code));
        return;
      }
      case 'wrong-node': {
        // A node started with `--region` of another code than its etcd is bound to (the second review's wrong code).
        const cluster = this.clusters.current.get(e.region % this.s.regions) ?? 'r0';
        this.nodes.push(this.startNode(cluster, e.code % this.s.regions));
        return;
      }
      case 'borrower': {
        const cluster = this.clusters.current.get(e.region % this.s.regions) ?? 'r0';
        this.nodes.push(this.startNode(cluster, e.region % this.s.regions, false, e.registry === 1 ? 'reg2' : 'reg'));
        return;
      }
      default:
        this.operator.start(e);
    }
  }

  /** The audit over every simulated etcd and the journals, judged against the overlaps the run saw. */
  private audit(elapsed: number, judge: boolean): Record<string, number> {
    const views = [...this.clusters.models]
      .filter(([name]) => !name.startsWith('reg'))
      .map(([name, model]) => regionViewOf({ name, where: name, prefix: PREFIX, ...readAll(model) }))
      .filter((v) => v.binding !== undefined || v.slots.some((sl) => sl.worker !== undefined));
    const findings: Finding[] = auditDeployment(views, { entries: this.journal.entries(), problems: [] });
    this.auditLines = findings.map((f) => `${f.kind}: ${f.message}`);
    const byKind: Record<string, number> = {};
    for (const f of findings) byKind[f.kind] = (byKind[f.kind] ?? 0) + 1;
    if (!judge) return byKind;
    const reported = new Set(
      findings.flatMap((f) => (f.overlap === undefined ? [] : [`${f.overlap.code}/${f.overlap.worker}`])),
    );
    const seenOverlaps = new Map<string, string>();
    for (const [slot, bySlot] of this.holders) {
      const spans = [...bySlot];
      for (let i = 0; i < spans.length; i++)
        for (let j = i + 1; j < spans.length; j++) {
          const [ha, a] = spans[i] as [string, { from: number; to: number }];
          const [hb, b] = spans[j] as [string, { from: number; to: number }];
          if (a.from <= b.to && b.from <= a.to)
            seenOverlaps.set(slot, `${ha} (${a.from}…${a.to}) and ${hb} (${b.from}…${b.to})`);
        }
    }
    for (const [slot, pair] of seenOverlaps)
      if (!reported.has(slot))
        this.violations.push({
          kind: 'audit-missed',
          atMs: elapsed,
          message: `slot ${slot}: ${pair} minted in overlapping ms; the audit reports no overlap of it (${findings.length} finding(s))`,
        });
    for (const f of findings)
      if (f.overlap !== undefined && !seenOverlaps.has(`${f.overlap.code}/${f.overlap.worker}`))
        this.violations.push({
          kind: 'audit-false-alarm',
          atMs: elapsed,
          message: `${f.message}; the run saw on it: ${[
            ...(this.holders.get(`${f.overlap.code}/${f.overlap.worker}`) ?? []),
          ]
            .map(([h, sp]) => `${h} minted ${sp.from}…${sp.to}`)
            .join(', ')}`,
        });
    return byKind;
  }
}

/** Every key under the prefix, as `regionViewOf` reads it (the model's state: an audit's range read). */
function readAll(model: EtcdModel): { clusterId: string; revision: string; kvs: EtcdKeyValue[] } {
  const res = model.range({ key: Buffer.from(`${PREFIX}/`), range_end: Buffer.from(`${PREFIX}0`) }) as {
    header: { cluster_id: string; revision: string };
    kvs: { key: unknown; value: unknown; lease: unknown }[];
  };
  const text = (b: unknown): string => (Buffer.isBuffer(b) ? b.toString('utf8') : String(b));
  return {
    clusterId: res.header.cluster_id,
    revision: res.header.revision,
    kvs: res.kvs.map((kv) => ({ key: text(kv.key), value: text(kv.value), lease: String(kv.lease ?? '0') })),
  };
}
