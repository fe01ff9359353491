import { parseArgs } from 'node:util';
import fc from 'fast-check';
import { scenarioArb } from './runner.js';
import { runMutants } from './mutants.js';
import { ScheduleRunner, type ScheduleBounds } from './schedule-runner.js';
import type { RunReport, Scenario } from './deployment.js';

/**
 * `npm run sim`: explores fault schedules of a simulated deployment for a wall-clock budget, from a seed it prints.
 * A violation is shrunk by fast-check to a minimal schedule and printed with the command that replays it.
 *
 *   npm run sim -- [--seed N] [--minutes M | --budget-seconds S] [--sim-seconds T] [--shrink-seconds R] [--path P]
 *                  [--mutants]
 */
const USAGE =
  'usage: npm run sim -- [--seed N] [--minutes M | --budget-seconds S] [--sim-seconds T] [--shrink-seconds R] [--path P] [--mutants [--mutant NAME]...]';

function int(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) {
    process.stderr.write(`sim: --${name} must be an integer of at least ${min}, got ${JSON.stringify(v)}\n${USAGE}\n`);
    process.exit(2);
  }
  return n;
}

/** Explores schedules from `seed` for `budgetMs` of wall time; returns the exit code. */
export async function explore(o: {
  seed: number;
  budgetMs: number;
  simMs: number;
  path?: string;
  out?: (line: string) => void;
  /** Wall time a failure may spend shrinking beyond the budget; default {@link SHRINK_MS}. */
  shrinkMs?: number;
  /** How one schedule is bounded in wall time (a stuck schedule is a finding, never a hang). */
  bounds?: ScheduleBounds;
  /** The schedules to draw from; default {@link scenarioArb} (a spec gives its own). */
  arb?: fc.Arbitrary<{ scenario: Scenario; netSeed: number }>;
}): Promise<{ code: number; runs: number; simulatedMs: number; wallMs: number; found?: string; violation?: string }> {
  const out = o.out ?? ((l: string) => process.stdout.write(`${l}\n`));
  const runner = new ScheduleRunner(o.bounds);
  try {
    return await exploreWith(runner, o, out);
  } finally {
    await runner.close();
  }
}

async function exploreWith(
  runner: ScheduleRunner,
  o: Parameters<typeof explore>[0],
  out: (line: string) => void,
): Promise<{ code: number; runs: number; simulatedMs: number; wallMs: number; found?: string; violation?: string }> {
  // Wall time from hrtime: Date and performance are the simulated clock's while a schedule runs.
  const wallNow = (): number => Number(process.hrtime.bigint() / 1_000_000n);
  const started = wallNow();
  let runs = 0;
  let simulatedMs = 0;
  /** Errors no code path handled, by text: printed at the end (a real process would have died of each). */
  const escaped = new Map<string, number>();
  const shrinkMs = o.shrinkMs ?? SHRINK_MS;
  /** The last failing schedule and its report: fast-check's counterexample is the last value that failed. */
  let lastFailure: { key: string; report: RunReport } | undefined;
  /** When (wall ms from the start) the first failure was found: shrinking it may take `shrinkMs` more. */
  let failedAt: number | undefined;
  /** How many schedules had run when the first failure was found (itself included). */
  let runsAtFailure: number | undefined;
  /** No schedule runs past the budget plus the shrink cap (wall ms from the start). */
  const hardEnd = o.budgetMs + shrinkMs;
  const property = fc.asyncProperty(o.arb ?? scenarioArb(o.simMs), async ({ scenario, netSeed }) => {
    // Past the budget the chunk's remaining schedules pass at once, and so do shrink attempts past the shrink cap
    // (counted from the first failure). A replay (--path) runs its schedule once, not shrinking it further.
    const spent = wallNow() - started;
    if (
      o.path === undefined
        ? spent >= (failedAt === undefined ? o.budgetMs : failedAt + shrinkMs)
        : lastFailure !== undefined
    )
      return true;
    const r = await runner.run(
      scenario,
      netSeed,
      o.path === undefined ? { endBy: Date.now() + (hardEnd - spent) } : {},
    );
    if (r.unfinished === true) return true;
    if (r.violations.length > 0) {
      lastFailure = { key: JSON.stringify({ scenario, netSeed }), report: r };
      failedAt ??= wallNow() - started;
      runsAtFailure ??= runs + 1;
    }
    runs++;
    simulatedMs += r.simulatedMs;
    for (const e of r.escapedErrors ?? []) escaped.set(e, (escaped.get(e) ?? 0) + 1);
    return r.violations.length === 0;
  });
  // Chunks of schedules, each its own fast-check seed (seed + chunk), until the budget is spent. The budget and the
  // shrink cap are kept by the property itself (past them it passes at once), never by fast-check's
  // interruptAfterTimeLimit: that races the running schedule and abandons it, and the next one then started beside it
  // on the same thread (in one process, with the fake clock still installed, every later schedule ended in "Can't
  // install fake timers twice", and fast-check's own timers, faked, never fired: the runs that never ended).
  for (let chunk = 0; wallNow() - started < o.budgetMs; chunk++) {
    const seed = o.seed + chunk;
    const result = await fc.check(property, {
      seed,
      numRuns: o.path === undefined ? CHUNK : 1,
      ...(o.path === undefined ? {} : { path: o.path }),
      endOnFailure: false,
    });
    if (result.failed && result.counterexample !== null) {
      const [ce] = result.counterexample;
      // The shrunk schedule's violation: from its last run, or (a value fast-check did not end on) one run more.
      const r =
        lastFailure !== undefined && lastFailure.key === JSON.stringify(ce)
          ? lastFailure.report
          : await runner.run(ce.scenario, ce.netSeed);
      const wallMs = wallNow() - started;
      const replay = `npm run sim -- --seed ${seed} --sim-seconds ${o.simMs / 1000} --path ${result.counterexamplePath ?? ''}`;
      out(
        `sim: VIOLATION after ${runsAtFailure ?? runs} schedules, ${((failedAt ?? wallMs) / 1000).toFixed(1)} s ` +
          `(shrunk by ${runs - (runsAtFailure ?? runs)} more, ${((wallMs - (failedAt ?? wallMs)) / 1000).toFixed(1)} s)`,
      );
      for (const v of r.violations.slice(0, 5)) out(`  ${v.kind} at +${v.atMs} ms: ${v.message}`);
      out(`  shrunk schedule: ${JSON.stringify(ce)}`);
      out(`  replay: ${replay}`);
      const first = r.violations[0];
      return {
        code: 1,
        runs,
        simulatedMs,
        wallMs,
        found: replay,
        ...(first === undefined ? {} : { violation: `${first.kind} at +${first.atMs} ms: ${first.message}` }),
      };
    }
    if (o.path !== undefined) break;
  }
  for (const [e, n] of escaped) out(`sim: an error no code path handled, ${n} time(s): ${e}`);
  return { code: 0, runs, simulatedMs, wallMs: wallNow() - started };
}

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
        mutants: { type: 'boolean' },
        mutant: { type: 'string', multiple: true },
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
  if (values.mutants === true) {
    process.exitCode = await runMutants({ seed, budgetSeconds, simMs, only: values.mutant ?? [] });
    return;
  }
  process.stdout.write(
    `sim: seed ${seed}, budget ${budgetSeconds} s of wall time, ${simMs / 1000} s of simulated time per schedule\n` +
      `sim: replay with: npm run sim -- --seed ${seed} --budget-seconds ${budgetSeconds} --sim-seconds ${simMs / 1000}\n`,
  );
  const r = await explore({
    seed,
    budgetMs: budgetSeconds * 1000,
    simMs,
    ...(values.path === undefined ? {} : { path: values.path }),
    ...(shrinkSeconds === undefined ? {} : { shrinkMs: shrinkSeconds * 1000 }),
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
