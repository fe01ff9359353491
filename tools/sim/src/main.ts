import { parseArgs } from 'node:util';
import fc from 'fast-check';
import { runSimulated, scenarioArb } from './runner.js';
import { runMutants } from './mutants.js';
import { regionsArb, runRegionsSimulated } from './regions-runner.js';

/**
 * `npm run sim`: explores fault schedules of a simulated deployment for a wall-clock budget, from a seed it prints.
 * A violation is shrunk by fast-check to a minimal schedule and printed with the command that replays it.
 *
 *   npm run sim -- [--seed N] [--minutes M | --budget-seconds S] [--sim-seconds T] [--path P] [--mutants]
 */
const USAGE =
  'usage: npm run sim -- [--seed N] [--minutes M | --budget-seconds S] [--sim-seconds T] [--path P] [--regions [--no-audit]] [--mutants [--only NAME,...]]';

/** What a schedule's run returns, for either scenario. */
interface Outcome {
  readonly violations: readonly { readonly kind: string; readonly atMs: number; readonly message: string }[];
  readonly simulatedMs: number;
  readonly escapedErrors?: readonly string[];
}

/** The scenario explored: one region (runner.ts), or a whole deployment with `--regions` (regions-runner.ts). */
function simulation(
  regions: boolean,
  simMs: number,
  audit: boolean,
): {
  arb: fc.Arbitrary<{ scenario: unknown; netSeed: number }>;
  run: (scenario: unknown, netSeed: number) => Promise<Outcome>;
} {
  return regions
    ? { arb: regionsArb(simMs), run: (s, n) => runRegionsSimulated(s as never, n, { audit }) }
    : { arb: scenarioArb(simMs), run: (s, n) => runSimulated(s as never, n) };
}

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
  /** The whole deployment (regions.ts) instead of one region. */
  regions?: boolean;
  /** With `regions`: judge the audit's soundness at each schedule's end (default true). */
  audit?: boolean;
  out?: (line: string) => void;
}): Promise<{ code: number; runs: number; simulatedMs: number; wallMs: number; found?: string }> {
  const out = o.out ?? ((l: string) => process.stdout.write(`${l}\n`));
  // Wall time from hrtime: Date and performance are the simulated clock's while a schedule runs.
  const wallNow = (): number => Number(process.hrtime.bigint() / 1_000_000n);
  const started = wallNow();
  let runs = 0;
  let simulatedMs = 0;
  /** Errors no code path handled, by text: printed at the end (a real process would have died of each). */
  const escaped = new Map<string, number>();
  const sim = simulation(o.regions === true, o.simMs, o.audit !== false);
  const property = fc.asyncProperty(sim.arb, async ({ scenario, netSeed }) => {
    // Past the budget the chunk's remaining schedules are skipped (a replay with --path always runs).
    if (o.path === undefined && wallNow() - started >= o.budgetMs) return true;
    const r = await sim.run(scenario, netSeed);
    runs++;
    simulatedMs += r.simulatedMs;
    for (const e of r.escapedErrors ?? []) escaped.set(e, (escaped.get(e) ?? 0) + 1);
    return r.violations.length === 0;
  });
  // Chunks of schedules, each its own fast-check seed (seed + chunk), until the budget is spent: fast-check's own
  // time limit abandons a running schedule, whose fake clock would stay installed.
  for (let chunk = 0; wallNow() - started < o.budgetMs; chunk++) {
    const seed = o.seed + chunk;
    const result = await fc.check(property, {
      seed,
      numRuns: o.path === undefined ? CHUNK : 1,
      ...(o.path === undefined ? {} : { path: o.path }),
      endOnFailure: false,
      // Shrinking a failure is bounded too (fast-check checks the limit between runs, never abandons one): what is
      // left of the budget plus SHRINK_MS; a failure interrupted while shrinking is reported as shrunk so far.
      interruptAfterTimeLimit: Math.max(1, o.budgetMs - (wallNow() - started)) + SHRINK_MS,
      markInterruptAsFailure: false,
    });
    if (result.failed && result.counterexample !== null) {
      const [ce] = result.counterexample;
      // Run the shrunk schedule once more to print its violation (or the error the run ended with).
      const r = await sim.run(ce.scenario, ce.netSeed).catch((e: unknown) => ({
        violations: [{ kind: 'error', atMs: -1, message: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }],
      }));
      const wallMs = wallNow() - started;
      const replay = `npm run sim -- --seed ${seed} --sim-seconds ${o.simMs / 1000}${o.regions === true ? ' --regions' : ''}${o.audit === false ? ' --no-audit' : ''} --path ${result.counterexamplePath ?? ''}`;
      out(`sim: VIOLATION after ${runs} schedules, ${(wallMs / 1000).toFixed(1)} s`);
      for (const v of r.violations.slice(0, 5)) out(`  ${v.kind} at +${v.atMs} ms: ${v.message}`);
      out(`  shrunk schedule: ${JSON.stringify(ce)}`);
      out(`  replay: ${replay}`);
      return { code: 1, runs, simulatedMs, wallMs, found: replay };
    }
    if (o.path !== undefined) break;
  }
  for (const [e, n] of escaped) out(`sim: an error no code path handled, ${n} time(s): ${e}`);
  return { code: 0, runs, simulatedMs, wallMs: wallNow() - started };
}

/** Schedules per fast-check seed. */
const CHUNK = 10;

/** Wall time a failure may spend shrinking beyond the budget. */
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
        mutants: { type: 'boolean' },
        regions: { type: 'boolean' },
        'no-audit': { type: 'boolean' },
        only: { type: 'string' },
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
  if (values.mutants === true) {
    process.exitCode = await runMutants({
      seed,
      budgetSeconds,
      simMs,
      regions: values.regions === true,
      ...(values.only === undefined ? {} : { only: values.only.split(',') }),
    });
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
    regions: values.regions === true,
    audit: values['no-audit'] !== true,
    ...(values.path === undefined ? {} : { path: values.path }),
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
