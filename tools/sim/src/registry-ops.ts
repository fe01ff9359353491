import {
  adoptSpareCode,
  beginReclaim,
  exportHandover,
  heldSlotsUnder,
  initRegion,
  initRegistry,
  lendSpareCode,
  markRegionRestored,
  noteRegistrySeen,
  noteRegistrySeenInAll,
  reconcileRegistry,
  type Handover,
  type RegionEtcd,
  type RegistryIo,
} from '@idgen/lease/operator';
import type { Etcd3 } from 'etcd3';
import { createEtcdClient } from '@idgen/lease';
import type { SimNet } from './sim-transport.js';
import type { Clusters } from './clusters.js';
import { createLayout } from '@idgen/core';

/**
 * The operator of a simulated deployment (issue 32 item 3): each step runs the real function behind one `idgen`
 * verb (apps/cli's region.ts, spare.ts, spare-registry-verbs.ts compose exactly these), as the process `op`, with the
 * schedule's arguments, which may be wrong (another region's etcd, the second registry, a deployment file that lists
 * no other region, no proof the old cluster is gone). A refused step is a normal outcome: its one line is recorded.
 * Steps run one after another, as one operator types them.
 */
export type OperatorStep =
  /** `etcdctl snapshot save` of any cluster (regions.ts's `ClusterRef`). */
  | { readonly kind: 'snapshot'; readonly cluster: number }
  /**
   * `etcdutl snapshot restore` of that cluster from its last snapshot (same or new cluster ID), then the runbook's
   * follow-up: none, `idgen region restored` (with or without `--old-etcd-stopped`: the old history is this etcd's
   * own, replaced, so the statement is true), or `idgen spare reconcile` for a registry.
   */
  | {
      readonly kind: 'restore';
      readonly cluster: number;
      readonly newCluster: boolean;
      readonly then: 'none' | 'restored' | 'restored-stopped' | 'reconcile';
      readonly ttlSeconds: number;
    }
  /** `idgen spare lend <code> --to-region <to> --etcd <etcdOf's etcd> --registry <registry> --config <deployment>`. */
  | {
      readonly kind: 'lend';
      readonly code: number;
      readonly to: number;
      readonly etcdOf: number;
      readonly registry: number;
      readonly deployment: 'all' | 'none';
    }
  /** `idgen spare reclaim <code> --etcd <from's etcd>`: begin, wait for the slots, write the handover. */
  | {
      readonly kind: 'reclaim';
      readonly code: number;
      readonly from: number;
      readonly registry: number;
      readonly deployment: 'all' | 'none';
    }
  /** `idgen region init --region <code>` on the spare code's new etcd, then `idgen spare adopt`; nodes start there. */
  | { readonly kind: 'adopt'; readonly code: number; readonly registry: number; readonly deployment: 'all' | 'none' }
  /**
   * A region moved to a new cluster restored from a snapshot taken now, while the old one still runs (issue 31 case
   * 4): `idgen region restored` on the new one with `--retire-etcd OLD`, or `--old-etcd-stopped` (after which the old
   * cluster's members are stopped, as the runbook's steps do before the flag), or neither; nodes start on the new.
   */
  | { readonly kind: 'move'; readonly region: number; readonly proof: 'retire' | 'stopped' | 'none' }
  /** `idgen region init --region <code>` against any cluster. */
  | { readonly kind: 'init'; readonly cluster: number; readonly code: number }
  /** `idgen spare init --registry <registry> --config <deployment>`. */
  /** `idgen spare init`; `only`: with a deployment file that lists that region alone (case 5's operator). */
  | { readonly kind: 'spare-init'; readonly registry: number; readonly only?: number }
  /** `idgen spare reconcile --registry <registry> --config <deployment>`. */
  | { readonly kind: 'reconcile'; readonly registry: number };

/** A step's outcome. */
export interface StepOutcome {
  readonly step: string;
  readonly ok: boolean;
  readonly detail: string;
}

/**
 * The deployment's layout: docs/design.md §1's with 2 worker bits (4 workers per code) and 5 more sequence bits. A
 * borrower claims any worker of a lent code (starting at a random one), so with 128 workers two holders of one code
 * (a borrower and an adopter, two borrowers of a double loan) almost never meet on one worker in a short run; a real
 * fleet fills the range. 4 workers make them meet as a fleet would.
 */
export const SIM_LAYOUT = createLayout({ workerBits: 2, sequenceBits: 17 });

const PREFIX = '/idgen';
const TIMEOUT_MS = 3000;

/** What the operator needs of the run: starting nodes on a code's cluster. */
export interface OperatorHooks {
  readonly regions: number;
  readonly workers: number;
  /** Starts `count` nodes of `code` on `cluster`, on the region's slots or (`wholeCode`) on any worker of the code. */
  startNodes(code: number, cluster: string, count: number, wholeCode: boolean): void;
}

/**
 * The simulated deployment's loan term (`idgen spare init --loan-term 12`): four of the shortest node TTLs' largest
 * (3 s), so that a new loan's first claim (a term and a quarter after the lend) and a reclaim's adopt (the term and the
 * TTL ceiling after the reclaim) both land inside a one-minute schedule. Nodes with a 6 s TTL never borrow under it
 * (a confirmation needs four TTLs of term): they are the refusal the stories keep.
 */
const LOAN_TERM_MS = 12_000;

/** Runs {@link OperatorStep}s against a deployment's clusters, one after another. */
export class RegistryOperator {
  readonly outcomes: StepOutcome[] = [];
  private readonly clients = new Map<string, Etcd3>();
  private readonly codeOf = new Map<string, number>();
  private readonly handovers = new Map<number, Handover>();
  private readonly adopted = new Set<number>();
  private chain: Promise<void> = Promise.resolve();
  private moves = 0;

  constructor(
    private readonly net: SimNet,
    private readonly clusters: Clusters,
    private readonly hooks: OperatorHooks,
  ) {
    for (let c = 0; c < hooks.regions; c++) this.codeOf.set(`r${c}`, c);
    this.codeOf.set('x5', 5);
    this.codeOf.set('x6', 6);
  }

  /** The deployment's setup: `idgen region init` on every region, `idgen spare init` with the registry. */
  async setup(): Promise<void> {
    for (let c = 0; c < this.hooks.regions; c++)
      await initRegion(this.io(`r${c}`), c, { ttlCeilingSeconds: 6 }).catch(() => undefined);
    const { now } = await initRegistry(this.registry(0), { now: Date.now, loanTermMs: LOAN_TERM_MS });
    for (const r of this.deployment('all')) await noteRegistrySeen(r, now.identity, now.revision, { now: Date.now });
  }

  /** Queues a step behind the ones before it. */
  start(step: OperatorStep): void {
    this.chain = this.chain.then(async () => {
      try {
        const detail = await this.run(step);
        this.outcomes.push({ step: describe(step), ok: true, detail });
      } catch (e) {
        const m = e instanceof Error ? e.message : String(e);
        this.outcomes.push({ step: describe(step), ok: false, detail: m.split('\n')[0] ?? m });
      }
    });
  }

  /** Settles when every queued step has ended. */
  idle(): Promise<void> {
    return this.chain;
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
  }

  private client(cluster: string): Etcd3 {
    let c = this.clients.get(cluster);
    if (c === undefined) {
      c = createEtcdClient({ endpoints: this.net.endpoints('op', cluster), tls: undefined, auth: undefined });
      this.clients.set(cluster, c);
    }
    return c;
  }

  private io(cluster: string): {
    client: Etcd3;
    prefix: string;
    timeoutMs: number;
    layout: typeof SIM_LAYOUT;
    now: () => number;
  } {
    return {
      client: this.client(cluster),
      prefix: PREFIX,
      timeoutMs: TIMEOUT_MS,
      layout: SIM_LAYOUT,
      now: Date.now,
    };
  }

  private registry(i: number): RegistryIo {
    const name = i % 2 === 0 ? 'reg' : 'reg2';
    return { client: this.client(name), prefix: PREFIX, timeoutMs: TIMEOUT_MS, name };
  }

  /** The deployment file's regions: every code's cluster now, and the adopters. */
  private deployment(which: 'all' | 'none'): RegionEtcd[] {
    if (which === 'none') return [];
    const codes = [...Array(this.hooks.regions).keys(), ...this.adopted];
    return codes.map((code) => {
      const name = this.clusters.current.get(code) ?? `x${code}`;
      return { client: this.client(name), prefix: PREFIX, timeoutMs: TIMEOUT_MS, name };
    });
  }

  private regionCluster(region: number): string {
    return this.clusters.current.get(region % this.hooks.regions) ?? 'r0';
  }

  private async run(step: OperatorStep): Promise<string> {
    switch (step.kind) {
      case 'snapshot': {
        const name = this.clusters.resolve(step.cluster);
        this.clusters.snapshots.set(name, this.clusters.model(name).snapshot());
        return name;
      }
      case 'restore': {
        const name = this.clusters.resolve(step.cluster);
        const snap = this.clusters.snapshots.get(name);
        if (snap === undefined) throw new Error(`no snapshot of ${name}`);
        this.clusters.model(name).restore(snap, step.newCluster ? this.clusters.freshId() : undefined);
        this.net.restarted(name);
        const code = this.codeOf.get(name);
        if (step.then === 'reconcile' || code === undefined) {
          if (step.then !== 'reconcile' || !name.startsWith('reg')) return `${name} restored`;
          const r = await reconcileRegistry({
            registry: this.registry(name === 'reg' ? 0 : 1),
            regions: this.deployment('all'),
            layout: SIM_LAYOUT,
            now: Date.now,
          });
          return `${name} restored and reconciled at ${r.revision}`;
        }
        if (step.then === 'none') return `${name} restored`;
        const report = await markRegionRestored({ ...this.io(name), registry: this.registry(0) }, code, {
          ttlMs: step.ttlSeconds * 1000,
          oldClusterStopped: step.then === 'restored-stopped',
        });
        return `${name} restored; region restored: ${report.written} slot(s)`;
      }
      case 'lend': {
        const etcd = this.regionCluster(step.etcdOf);
        const r = await lendSpareCode(
          { ...this.io(etcd), registry: this.registry(step.registry), deployment: this.deployment(step.deployment) },
          step.code,
          step.to % this.hooks.regions,
        );
        return `lent: ${r.record.state}`;
      }
      case 'reclaim': {
        const etcd = this.regionCluster(step.from);
        const io = {
          ...this.io(etcd),
          registry: this.registry(step.registry),
          deployment: this.deployment(step.deployment),
        };
        await beginReclaim(io, step.code);
        const end = Date.now() + 20_000;
        let held = await heldSlotsUnder(io, step.code);
        while (held.length > 0 && Date.now() < end) {
          await new Promise((r) => setTimeout(r, 500));
          held = await heldSlotsUnder(io, step.code);
        }
        if (held.length > 0) throw new Error(`code ${step.code}: ${held.length} slot(s) still held`);
        const h = await exportHandover({ ...io, ttlMs: 6000, clockBoundMs: 10 }, step.code);
        this.handovers.set(step.code, h);
        return `reclaimed from region ${h.lentTo}`;
      }
      case 'adopt': {
        const h = this.handovers.get(step.code);
        if (h === undefined) throw new Error(`no handover file for code ${step.code}`);
        const name = `x${step.code}`;
        await initRegion(this.io(name), step.code, { ttlCeilingSeconds: 6 });
        await adoptSpareCode(
          { ...this.io(name), registry: this.registry(step.registry), deployment: this.deployment(step.deployment) },
          h,
        );
        if (!this.adopted.has(step.code)) {
          this.adopted.add(step.code);
          this.clusters.current.set(step.code, name);
          // The new region fills the code, as a fleet would: a holder of a dead loan meets one of them on its worker.
          this.hooks.startNodes(step.code, name, SIM_LAYOUT.maxWorker + 1, true);
        }
        return `adopted in ${name}`;
      }
      case 'move': {
        const code = step.region % this.hooks.regions;
        const old = this.regionCluster(code);
        const name = `r${code}m${++this.moves}`;
        this.clusters.add(name, this.clusters.model(old).snapshot());
        this.codeOf.set(name, code);
        if (step.proof === 'stopped') this.net.setMemberDown(old, 0, true);
        await markRegionRestored({ ...this.io(name), registry: this.registry(0) }, code, {
          ttlMs: 6000,
          ...(step.proof === 'retire'
            ? { retire: { client: this.client(old), prefix: PREFIX, timeoutMs: TIMEOUT_MS, layout: SIM_LAYOUT } }
            : {}),
          oldClusterStopped: step.proof === 'stopped',
        });
        this.clusters.current.set(code, name);
        this.hooks.startNodes(code, name, this.hooks.workers, false);
        return `region ${code} moved from ${old} to ${name}`;
      }
      case 'init': {
        const name = this.clusters.resolve(step.cluster);
        const r = await initRegion(this.io(name), step.code, { ttlCeilingSeconds: 6 });
        return `${name} bound to ${r.record.code}${r.changed ? '' : ' (already)'}`;
      }
      case 'spare-init': {
        const { now } = await initRegistry(this.registry(step.registry), { now: Date.now, loanTermMs: LOAN_TERM_MS });
        const regions = this.deployment('all').filter(
          (r) => step.only === undefined || r.name === this.regionCluster(step.only),
        );
        await noteRegistrySeenInAll(regions, now.identity, now.revision, { now: Date.now });
        return `registry ${now.identity.clusterId} at ${now.revision}`;
      }
      case 'reconcile': {
        const r = await reconcileRegistry({
          registry: this.registry(step.registry),
          regions: this.deployment('all'),
          layout: SIM_LAYOUT,
          now: Date.now,
        });
        return `reconciled at ${r.revision}`;
      }
    }
  }
}

function describe(s: OperatorStep): string {
  return JSON.stringify(s);
}
