/**
 * One chaos run (issue 7): a 3-member etcd cluster, `nodes` generator nodes sharing `slots` worker slots in
 * one region, `callers` caller processes minting continuously, the seeded fault schedule, and then the
 * verification of every ID every caller received. Loopback only; every process and directory it starts
 * is registered with `@idgen/testing`'s cleanup registry, so an interrupt or a crash still cleans up.
 *
 * The steps are {@link ChaosRun}'s methods (src/chaos-run.ts), each fault kind's handler is in
 * src/faults/index.ts, and the verdict in src/run-verdict.ts; this module keeps the run's options and result.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CallerCostReport } from './caller-cost.js';
import { ChaosRun } from './chaos-run.js';
import type { AuditOutcome } from './faults/audit.js';
import type { EmbeddedFaultRecord } from './embedded-fleet.js';
import type { NodeMetrics } from './node-metrics.js';
import type { RegionsReport } from './regions.js';
import type { Fault, FaultKind, Schedule } from './schedule.js';
import type {
  ClockAllowance,
  ClockBoundReport,
  DuplicateReport,
  HandedOutReport,
  HolderReport,
  OutageReport,
} from './verify.js';

export { CLOCK_BOUND_MS } from './run-verdict.js';

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
  /**
   * Regions (`--regions`, default 1): from 2 on, regions `region + 1` … get their own etcd, nodes and callers, every
   * caller falls back to the other regions, and the schedule adds the region kinds (src/regions.ts).
   */
  readonly regions?: number;
  /**
   * `--netns`: node n1 runs in its own network namespace and reaches etcd through a router namespace
   * (src/netns/netns-node-link.ts), and the schedule adds `netns-partition`. Needs root and iproute2 (fails otherwise).
   */
  readonly netns?: boolean;
  /** `--server-main` as given, when given (for the report's reproduce line). */
  readonly serverMainFlag?: string;
  /**
   * A previous release's `bin/idgen-server.js` or `dist/main.js` (`--previous-server`): `rolling-restart` alternates
   * it with the tree's build (src/faults/rolling-restart.ts), and the default kinds include `rolling-restart`.
   */
  readonly previousServer?: string;
  /** Only these fault kinds (`--faults`); default all. */
  readonly kinds?: readonly FaultKind[];
  /** `apps/server/dist/main.js` (or another build's, `--server-main`). */
  readonly serverMain: string;
  /** `tools/chaos/dist/caller.js`. */
  readonly callerMain: string;
  /** `tools/chaos/dist/netns/relay-main.js` (`--netns`). */
  readonly relayMain: string;
  /** `apps/cli/dist/main.js`: the operator's `idgen` the faults run (unless `operatorCliMain`). */
  readonly cliMain: string;
  /**
   * The operator's `idgen` the faults run (`spare lend`, `region restored`; `--cli-main`, or the CLI of the
   * `--server-main` build's tree): default `cliMain`.
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
  /**
   * How long the run waited, before this fault began, for the previous one's recovery (fewer nodes serving than
   * slots): that time belongs to the previous fault, not to the time outside any fault (issue 25).
   */
  settleWaitMs?: number;
  /** A partition's figures (`partition-node`, `partition-clock-forward`, `netns-partition`), for the side-by-side. */
  partition?: PartitionFigures;
  /** An expectation of issue 7 that did not hold (a fence that should not happen, or one that should). */
  expectationMissed: string | undefined;
  /** A safety expectation that did not hold (an ID handed out twice, a refused node that served): fails the run. */
  safetyViolation: string | undefined;
}

/** What one partition did to its node, proxy or namespace alike (src/faults/partition-node.ts). */
export interface PartitionFigures {
  /** `proxy`: the TCP proxy reads and drops, closes every connection on restore; `netns`: the router drops silently. */
  readonly via: 'proxy' | 'netns';
  /** Cut → the cut node's first fence line (undefined: none while cut). */
  readonly cutToFenceMs: number | undefined;
  /** The cut node's guard fences from the cut to the heal, by reason. */
  readonly fences: Readonly<Record<string, number>>;
  /** Cut → another node holding its worker. */
  readonly takeoverMs: number | undefined;
  readonly cutMs: number;
  /**
   * Heal → the cut node's first claim etcd settled (a slot claimed or held, or refused for no free slot): how soon it
   * hears etcd again; undefined: not within 30 s.
   */
  healToEtcdMs: number | undefined;
  /** What that first answer was. */
  healAnswer: string | undefined;
  /** The run's own probe of the cut node while cut (500 ms deadline each). */
  readonly probeOk: number;
  readonly probeFailed: number;
}

/** The result of a run. */
export interface ChaosResult {
  readonly seed: number;
  /** `--faults`, when given. */
  readonly kinds: readonly FaultKind[] | undefined;
  /** `--netns` was given. */
  readonly netns: boolean;
  /** The server build the nodes ran, and `--server-main` when given. */
  readonly serverMain: string;
  readonly serverMainFlag: string | undefined;
  /** `--previous-server`, when given. */
  readonly previousServer: string | undefined;
  /** The build each node process ran (`tree`, or the previous release's version), in start order. */
  readonly nodeVersions: readonly { readonly name: string; readonly version: string }[];
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
  /** What the faults cost the callers: latency, discarded IDs, hedges, fences per window and kind (issue 25). */
  readonly callerCost: CallerCostReport;
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
  /** The deployment audit (idgen audit's rules, in process) of the run's etcds after everything stopped. */
  readonly audit: AuditOutcome;
  /** Rule violations (any: exit non-zero). */
  readonly violations: number;
  readonly expectationsMissed: number;
  /** Faults whose safety expectation did not hold (any: exit non-zero, like a rule violation). */
  readonly safetyViolations: number;
  /** A run over regions (`--regions` ≥ 2): the regions, the failover table and the region-code check. */
  readonly regions?: RegionsReport;
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

/** Runs the whole thing. Throws on a setup failure; violations are in the result. */
export async function runChaos(o: ChaosOptions): Promise<ChaosResult> {
  const run = new ChaosRun(o, findFaketime());
  await run.setUp();
  const loadMs = await run.runSchedule();
  const stopped = await run.tearDown();
  return run.judge(loadMs, stopped);
}

/** The chaos run's paths relative to the built `tools/chaos/dist/main.js`. */
export function defaultPaths(distDir: string): {
  serverMain: string;
  callerMain: string;
  relayMain: string;
  embeddedMain: string;
  cliMain: string;
} {
  return {
    serverMain: join(distDir, '..', '..', '..', 'apps', 'server', 'dist', 'main.js'),
    cliMain: join(distDir, '..', '..', '..', 'apps', 'cli', 'dist', 'main.js'),
    callerMain: join(distDir, 'caller.js'),
    relayMain: join(distDir, 'netns', 'relay-main.js'),
    embeddedMain: join(distDir, 'embedded-caller.js'),
  };
}
