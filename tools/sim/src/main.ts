import { parseArgs } from 'node:util';
import fc from 'fast-check';
import { scenarioArb, storiesArb } from './runner.js';
import { regionsArb } from './regions-runner.js';
import type { RegionsScenario } from './regions.js';
import { runMutants } from './mutants.js';
import { ScheduleRunner, type ScheduleBounds, type ScheduleReport, type Simulation } from './schedule-runner.js';
import type { Scenario } from './deployment.js';

/**
 * `npm run sim`: explores fault schedules of a simulated deployment for a wall-clock budget, from a seed it prints.
 * A violation is shrunk by fast-check to a minimal schedule and printed with the command that replays it.
 *
 *   npm run sim -- [--seed N] [--minutes M | --budget-seconds S] [--sim-seconds T] [--shrink-seconds R]
 *                  [--threads N] [--path P] [--regions [--no-audit]] [--mutants [--mutant NAME]...]
 */
const USAGE =
  'usage: npm run sim -- [--seed N] [--minutes M | --budget-seconds S] [--sim-seconds T] [--shrink-seconds R] [--threads N] [--path P] [--regions [--no-audit]] [--mutants [--mutant NAME]...]';

function int(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) {
    process.stderr.write(`sim: --${name} must be an integer of at least ${min}, got ${JSON.stringify(v)}\n${USAGE}\n`);
    process.exit(2);
  }
  return n;
}

/** What {@link explore} found. */
export interface ExploreResult {
  readonly code: number;
  readonly runs: number;
  readonly simulatedMs: number;
  readonly wallMs: number;
  /** The replay command of the violation found. */
  readonly found?: string;
  /** Its first violation, in words. */
  readonly violation?: string;
}

/** Options of {@link explore}. */
export interface ExploreOptions {
  readonly seed: number;
  readonly budgetMs: number;
  readonly simMs: number;
  readonly path?: string;
  readonly out?: (line: string) => void;
  /** Wall time a failure may spend shrinking after it was found; default {@link SHRINK_MS}. */
  readonly shrinkMs?: number;
  /** How one schedule is bounded in wall time (a stuck schedule is a finding, never a hang). */
  readonly bounds?: ScheduleBounds;
  /**
   * The scenario explored: one region (default), or the whole deployment (`--regions`: regions.ts), whose audit's
   * soundness is judged at each schedule's end unless `audit` is false (`--no-audit`, as the mutants' runs).
   */
  readonly simulation?: Simulation;
  /** The schedules to draw from; default the simulation's own ({@link scenarioArb}, {@link regionsArb}). */
  readonly arb?: fc.Arbitrary<{ scenario: Scenario | RegionsScenario; netSeed: number }>;
  /** Schedule threads run side by side, each on its own chunks (fast-check seeds); default 1. */
  readonly threads?: number;
}

/**
 * Explores schedules from `seed` for `budgetMs` of wall time; returns the exit code. Chunks of {@link CHUNK}
 * schedules, each its own fast-check seed (seed + chunk), go to `threads` lanes side by side; the first lane to find
 * a violation shrinks it while the others stop, and its chunk's seed and path replay it alone.
 */
export async function explore(o: ExploreOptions): Promise<ExploreResult> {
  const out = o.out ?? ((l: string) => process.stdout.write(`${l}\n`));
  // Wall time from hrtime (never a fake clock's).
  const wallNow = (): number => Number(process.hrtime.bigint() / 1_000_000n);
  const shared: Exploration = {
    o,
    started: wallNow(),
    wallNow,
    shrinkMs: o.shrinkMs ?? SHRINK_MS,
    nextChunk: 0,
    runs: 0,
    simulatedMs: 0,
    escaped: new Map(),
  };
  const lanes = Array.from({ length: o.path === undefined ? Math.max(1, o.threads ?? 1) : 1 }, async () => {
    const runner = new ScheduleRunner(o.bounds, o.simulation);
    try {
      return await lane(runner, shared);
    } finally {
      await runner.close();
    }
  });
  const found = (await Promise.all(lanes)).find((r) => r !== undefined);
  const wallMs = wallNow() - shared.started;
  if (found !== undefined) {
    const { seed, path, report, runsAtFailure, failedAt } = found;
    const replay = `npm run sim -- --seed ${seed} --sim-seconds ${o.simMs / 1000}${simulationFlags(o.simulation)} --path ${path}`;
    out(
      `sim: VIOLATION after ${runsAtFailure} schedules, ${(failedAt / 1000).toFixed(1)} s ` +
        `(shrunk by ${shared.runs - runsAtFailure} more, ${((wallMs - failedAt) / 1000).toFixed(1)} s)`,
    );
    for (const v of report.violations.slice(0, 5)) out(`  ${v.kind} at +${v.atMs} ms: ${v.message}`);
    out(`  shrunk schedule: ${JSON.stringify(found.counterexample)}`);
    out(`  replay: ${replay}`);
    const first = report.violations[0];
    return {
      code: 1,
      runs: shared.runs,
      simulatedMs: shared.simulatedMs,
      wallMs,
      found: replay,
      ...(first === undefined ? {} : { violation: `${first.kind} at +${first.atMs} ms: ${first.message}` }),
    };
  }
  for (const [e, n] of shared.escaped) out(`sim: an error no code path handled, ${n} time(s): ${e}`);
  return { code: 0, runs: shared.runs, simulatedMs: shared.simulatedMs, wallMs };
}

/**
 * The schedules of `o.simulation`, for `o.simMs` of simulated time each, drawn with the chunk's fast-check `seed`: one
 * region's stories (runner.ts's `storiesArb`) for one seed in five, its random menu for the rest. The arbitrary is
 * chosen by seed, not inside one arbitrary: a chunk is 10 schedules, which fast-check draws biased toward small values,
 * and any change to the menu's own structure (a key more, a `oneof` around it) changed which schedules those are: the
 * menu then found issue 31's case 3 (`ttl-ceiling-hold`) in none of ~4,600 schedules against every ~50 before. A
 * replay's `--seed` names its chunk, so it picks the same arbitrary.
 */
function defaultArb(
  o: ExploreOptions,
  seed: number,
): fc.Arbitrary<{ scenario: Scenario | RegionsScenario; netSeed: number }> {
  if (o.simulation?.kind === 'regions') return regionsArb(o.simMs);
  return seed % 5 === 4 ? storiesArb(o.simMs) : scenarioArb(o.simMs);
}

/** The flags that name the simulation in a replay command. */
function simulationFlags(s: Simulation | undefined): string {
  if (s?.kind !== 'regions') return '';
  return s.audit ? ' --regions' : ' --regions --no-audit';
}

/** What the lanes of one {@link explore} share. */
interface Exploration {
  readonly o: ExploreOptions;
  readonly started: number;
  readonly wallNow: () => number;
  readonly shrinkMs: number;
  nextChunk: number;
  runs: number;
  simulatedMs: number;
  /** Errors no code path handled, by text: printed at the end (a real process would have died of each). */
  readonly escaped: Map<string, number>;
  /** When (wall ms from the start) the first failure was found, by any lane; shrinking it may take `shrinkMs`. */
  failedAt?: number;
  runsAtFailure?: number;
}

interface LaneFinding {
  readonly seed: number;
  readonly path: string;
  readonly counterexample: { scenario: Scenario | RegionsScenario; netSeed: number };
  readonly report: ScheduleReport;
  readonly failedAt: number;
  readonly runsAtFailure: number;
}

/** One lane: chunks until the budget is spent or a lane found a violation; its finding, shrunk. */
async function lane(runner: ScheduleRunner, x: Exploration): Promise<LaneFinding | undefined> {
  const { o, wallNow } = x;
  /** The last failing schedule of this lane and its report: fast-check's counterexample is the last value that failed. */
  let lastFailure: { key: string; report: ScheduleReport } | undefined;
  /** No schedule runs past the budget plus the shrink cap (wall ms from the start). */
  const hardEnd = o.budgetMs + x.shrinkMs;
  /** A replay (--path) has run its schedule. */
  let replayed = false;
  const property = (seed: number) =>
    fc.asyncProperty(o.arb ?? defaultArb(o, seed), async ({ scenario, netSeed }) => {
      // Past the budget the chunk's remaining schedules pass at once, and so do shrink attempts past the shrink cap
      // (counted from the first failure), and another lane's schedules once one lane found a failure. A replay
      // (--path) runs its schedule once, not shrinking it further.
      const spent = wallNow() - x.started;
      if (o.path !== undefined ? replayed : x.failedAt !== undefined && lastFailure === undefined) return true;
      replayed = true;
      if (o.path === undefined && spent >= (x.failedAt === undefined ? o.budgetMs : x.failedAt + x.shrinkMs))
        return true;
      const r = await runner.run(
        scenario,
        netSeed,
        o.path === undefined ? { endBy: Date.now() + (hardEnd - spent) } : {},
      );
      if (r.unfinished === true) return true;
      x.runs++;
      x.simulatedMs += r.simulatedMs;
      for (const e of r.escapedErrors ?? []) x.escaped.set(e, (x.escaped.get(e) ?? 0) + 1);
      if (r.violations.length === 0) return true;
      // Another lane found one first while this schedule ran: that one is shrunk, this one is let go.
      if (lastFailure === undefined && x.failedAt !== undefined) return true;
      lastFailure = { key: JSON.stringify({ scenario, netSeed }), report: r };
      x.failedAt ??= wallNow() - x.started;
      x.runsAtFailure ??= x.runs;
      return false;
    });
  // The budget and the shrink cap are kept by the property itself (past them it passes at once), never by
  // fast-check's interruptAfterTimeLimit: that races the running schedule and abandons it, and the next one then
  // started beside it on the same thread (in one process, with the fake clock still installed, every later schedule
  // ended in "Can't install fake timers twice", and fast-check's own timers, faked, never fired: the runs that never
  // ended).
  while (wallNow() - x.started < o.budgetMs && x.failedAt === undefined) {
    const seed = o.seed + x.nextChunk++;
    const result = await fc.check(property(seed), {
      seed,
      numRuns: o.path === undefined ? CHUNK : 1,
      ...(o.path === undefined ? {} : { path: o.path }),
      endOnFailure: false,
    });
    if (result.failed && result.counterexample !== null && lastFailure !== undefined) {
      const [ce] = result.counterexample;
      // The shrunk schedule's violation: from its last run, or (a value fast-check did not end on) one run more.
      // That run is bounded too: cut off after RERUN_MS, the last failure's report stands for it.
      const again =
        lastFailure.key === JSON.stringify(ce)
          ? undefined
          : await runner.run(ce.scenario, ce.netSeed, { endBy: Date.now() + RERUN_MS });
      const report = again === undefined || again.unfinished === true ? lastFailure.report : again;
      return {
        seed,
        path: result.counterexamplePath ?? '',
        counterexample: ce,
        report,
        failedAt: x.failedAt ?? 0,
        runsAtFailure: x.runsAtFailure ?? x.runs,
      };
    }
    if (o.path !== undefined) break;
  }
  return undefined;
}

/** Wall time the shrunk schedule may take when it is run once more to print its violation. */
const RERUN_MS = 15_000;

/** Schedules per fast-check seed. */
const CHUNK = 10;

/** Wall time a failure may spend shrinking beyond the budget (plus at most one schedule's wall bound). */
const SHRINK_MS = 60_000;

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        seed: { type: 'string' },
        minutes: { type: 'string' },
        'budget-seconds': { type: 'string' },
        'sim-seconds': { type: 'string' },
        path: { type: 'string' },
        'shrink-seconds': { type: 'string' },
        threads: { type: 'string' },
        mutants: { type: 'boolean' },
        mutant: { type: 'string', multiple: true },
        regions: { type: 'boolean' },
        'no-audit': { type: 'boolean' },
        help: { type: 'boolean' },
      },
      strict: true,
    }));
  } catch (e) {
    process.stderr.write(`sim: ${(e as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const seed = int('seed', values.seed, 0) ?? Math.floor(Math.random() * 2 ** 31);
  const budgetSeconds =
    int('budget-seconds', values['budget-seconds'], 1) ?? (int('minutes', values.minutes, 1) ?? 1) * 60;
  const simMs = (int('sim-seconds', values['sim-seconds'], 1) ?? 60) * 1000;
  const shrinkSeconds = int('shrink-seconds', values['shrink-seconds'], 0);
  const threads = int('threads', values.threads, 1) ?? 1;
  const simulation: Simulation =
    values.regions === true ? { kind: 'regions', audit: values['no-audit'] !== true } : { kind: 'region' };
  if (values.mutants === true) {
    process.exitCode = await runMutants({
      seed,
      budgetSeconds,
      simMs,
      threads,
      regions: values.regions === true,
      only: values.mutant ?? [],
    });
    return;
  }
  process.stdout.write(
    `sim: seed ${seed}, budget ${budgetSeconds} s of wall time, ${simMs / 1000} s of simulated time per schedule\n` +
      `sim: replay with: npm run sim -- --seed ${seed} --budget-seconds ${budgetSeconds} --sim-seconds ${simMs / 1000}${simulationFlags(simulation)}\n`,
  );
  const r = await explore({
    seed,
    budgetMs: budgetSeconds * 1000,
    simMs,
    simulation,
    ...(values.path === undefined ? {} : { path: values.path }),
    ...(shrinkSeconds === undefined ? {} : { shrinkMs: shrinkSeconds * 1000 }),
    threads,
  });
  const wallS = r.wallMs / 1000;
  process.stdout.write(
    `sim: ${r.runs} schedules, ${(r.simulatedMs / 1000).toFixed(0)} simulated s in ${wallS.toFixed(1)} wall s: ` +
      `${((r.runs / wallS) * 60).toFixed(1)} schedules/min, ${(r.simulatedMs / 1000 / wallS).toFixed(1)} simulated s per wall s` +
      `${r.code === 0 ? ', no violation' : ''}\n`,
  );
  process.exitCode = r.code;
}

if (require.main === module) void main();
