/**
 * What a fault handler of a chaos run gets: the run's parts ({@link FaultRun}) and the fault being run with its
 * record ({@link FaultContext}). Every fault kind has one {@link FaultHandler} (src/faults/index.ts); the run
 * (src/chaos-run.ts) settles the fleet, opens the record, and calls it.
 */
import type { EtcdCluster } from '@idgen/testing';
import type { Incarnation, NodeFleet } from './node-fleet.js';
import type { RegionOutage, RegionPart } from './regions.js';
import type { ChaosOptions, FaultRecord } from './run.js';
import type { Fault } from './schedule.js';
import type { ClockAllowance } from './verify.js';

/** The key prefix the run's nodes and embedded callers use (the servers' default; bindRegion's). */
export const ETCD_PREFIX = '/idgen';

/** When an `etcd-member-down` had its member stopped (judged at the end, with the window's failed calls). */
export interface MemberDown {
  readonly fromMs: number;
  readonly toMs: number;
}

/** The parts of a running chaos run a fault handler uses. */
export interface FaultRun {
  readonly o: ChaosOptions;
  readonly dir: string;
  readonly faketimeLib: string;
  readonly ttlMs: number;
  readonly cluster: EtcdCluster;
  readonly fleet: NodeFleet;
  /** The operator's `idgen` the faults run (`operatorCliMain`, default `cliMain`). */
  readonly operatorCli: string;
  /** The faults begun so far, this one last. */
  readonly records: readonly FaultRecord[];
  readonly memberDowns: Map<FaultRecord, MemberDown>;
  /** The further regions of a run over regions (`--regions`, src/regions.ts; empty in a one-region run). */
  readonly regions: readonly RegionPart[];
  /** When each region fault took its region away and gave it back (the failover table's times). */
  readonly regionOutages: Map<FaultRecord, RegionOutage>;
  /** A fresh name for the next wrong-region node (`wrong-region-1`, …). */
  nextWrongRegionName(): string;
  /** Sleeps `ms`, or less when the run is aborted. */
  sleep(ms: number): Promise<void>;
  /** Sets a node's clock ahead and records the allowance rule 3 gives its IDs until {@link clockBack}. */
  clockAhead(inc: Incarnation, seconds: number): Promise<ClockAllowance>;
  /** Back to true time; IDs minted before it may still arrive for a moment (a response in flight). */
  clockBack(inc: Incarnation, a: ClockAllowance): Promise<void>;
  /** Fences a node's guard logged since `fromMs`, by reason. */
  fencesOf(inc: Incarnation, fromMs: number, reason?: string): number;
  /** Asks `inc` for one ID after another until `until` (read on every request), verifying every block. */
  probe(inc: Incarnation, until: number | { untilMs: number }): Promise<{ ok: number; failed: number }>;
}

/** One fault as it runs. */
export interface FaultContext {
  readonly run: FaultRun;
  readonly fault: Fault;
  readonly record: FaultRecord;
  /** Wall ms the fault began. */
  readonly begin: number;
  /** Sleeps until the fault's effect is over (`begin + effectMs`). */
  until(): Promise<void>;
  /** Announces the fault and its target (`t+…s fault #n kind → target`). */
  line(): void;
  /**
   * The fault's node (picked among those serving, or the running process of `position`): named in the record (with
   * the worker it held), announced, its metrics scraped first.
   */
  hitNode(noteWorker: boolean, position?: string): Promise<Incarnation | undefined>;
}

/** Runs one fault kind; writes what it saw into `c.record`. */
export type FaultHandler = (c: FaultContext) => Promise<void>;
