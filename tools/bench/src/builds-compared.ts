/**
 * `bench:server --baseline <dir>`: the idgen node of another checkout (a commit before a change) against this
 * one, in the same run, case by case, at saturation. The two builds are loaded alternately, before then after,
 * round after round (A B A B), each for the same seconds: on a shared machine, load from elsewhere falls on both
 * sides of every pair, so their ratio is fairer than two figures from two runs.
 */
import { execFileSync } from 'node:child_process';
import type { H2loadResult } from './h2load.js';
import { median } from './stats.js';
import { formatCount, formatNanoseconds, formatTable } from './table.js';

/** Rounds per build and case: the least that shows whether the two rounds of one build agree. */
export const BUILD_ROUNDS = 2;

/** One case both builds answer: a request body and headers for the NextIds path. */
export interface BuildCase {
  readonly name: string;
  readonly bodyFile: string;
  readonly headers: readonly string[];
}

/** One build under load: what the report calls it and the port its node listens on. */
export interface Build {
  readonly label: string;
  readonly port: number;
}

/** Saturates the node on `port` with case `c` once (h2load); `tag` keeps each run's log apart. */
export type Saturate = (port: number, c: BuildCase, tag: string) => Promise<H2loadResult>;

/** Both builds' rounds of one case, in the order they ran within each build. */
export interface BuildsRow {
  readonly c: BuildCase;
  readonly before: readonly H2loadResult[];
  readonly after: readonly H2loadResult[];
}

/** What {@link compareBuilds} measured. */
export interface BuildsCompared {
  readonly before: Build;
  readonly after: Build;
  readonly rounds: number;
  readonly rows: readonly BuildsRow[];
}

/** Which build runs at each step of one case: before, after, before, after, … (`rounds` of each). */
export function alternation(rounds: number): ('before' | 'after')[] {
  if (!Number.isInteger(rounds) || rounds < 1) throw new RangeError(`rounds must be an integer ≥ 1, got ${rounds}`);
  return Array.from({ length: rounds * 2 }, (_, i) => (i % 2 === 0 ? 'before' : 'after'));
}

/**
 * Every case of `cases` on both builds, alternating as {@link alternation} orders them; `progress` is told of
 * each case once both builds are measured.
 */
export async function compareBuilds(
  cases: readonly BuildCase[],
  builds: { readonly before: Build; readonly after: Build },
  saturate: Saturate,
  o: { readonly rounds?: number; readonly progress?: (line: string) => void } = {},
): Promise<BuildsCompared> {
  const rounds = o.rounds ?? BUILD_ROUNDS;
  const rows: BuildsRow[] = [];
  for (const [index, c] of cases.entries()) {
    const measured = { before: [] as H2loadResult[], after: [] as H2loadResult[] };
    for (const side of alternation(rounds)) {
      const round = measured[side].length + 1;
      measured[side].push(await saturate(builds[side].port, c, `build-${index}-${side}-${round}`));
    }
    rows.push({ c, ...measured });
    o.progress?.(`  measured ${c.name}: before and after, ${rounds} rounds each`);
  }
  return { ...builds, rounds, rows };
}

const reqPerSecond = (results: readonly H2loadResult[]): number => median(results.map((r) => r.requestsPerSecond));
const p99Of = (results: readonly H2loadResult[]): number => median(results.map((r) => r.p99Us));
const failedOf = (results: readonly H2loadResult[]): number => results.reduce((sum, r) => sum + r.failed, 0);
const roundsOf = (results: readonly H2loadResult[]): string =>
  results.map((r) => formatCount(r.requestsPerSecond)).join(' / ');
const micros = (us: number): string => formatNanoseconds(us * 1000);

/** `after / before` as a factor with two decimals (`1.07×`): a ratio, not a share of a ceiling. */
export function formatRatio(after: number, before: number): string {
  if (!(before > 0) || !Number.isFinite(after)) return 'n/a';
  return `${(after / before).toFixed(2)}×`;
}

/**
 * The comparison as a report section: which builds, how they were loaded, then one row per case: the median of
 * each build's rounds (req/s and p99), after over before, each round's req/s in the order run, failed answers.
 */
export function formatBuildsCompared(m: BuildsCompared, seconds: number): string {
  const rows = m.rows.map(({ c, before, after }) => [
    c.name,
    formatCount(reqPerSecond(before)),
    formatCount(reqPerSecond(after)),
    formatRatio(reqPerSecond(after), reqPerSecond(before)),
    micros(p99Of(before)),
    micros(p99Of(after)),
    roundsOf(before),
    roundsOf(after),
    String(failedOf(before) + failedOf(after)),
  ]);
  return (
    `\nBuilds compared: before = ${m.before.label}; after = ${m.after.label}\n` +
    `Saturation, the same h2load load as above; per case the two nodes alternate, before then after, ` +
    `${m.rounds} rounds each of ${seconds} s (after 2 s of warm-up), so load from elsewhere on the shared machine ` +
    `falls on both sides of the ratio.\n\n` +
    formatTable(
      [
        { header: 'case' },
        { header: 'before req/s', align: 'right' },
        { header: 'after req/s', align: 'right' },
        { header: 'after/before', align: 'right' },
        { header: 'before p99', align: 'right' },
        { header: 'after p99', align: 'right' },
        { header: 'rounds before', align: 'right' },
        { header: 'rounds after', align: 'right' },
        { header: 'failed', align: 'right' },
      ],
      rows,
    ) +
    `req/s and p99: the median of each build's rounds; 'rounds': each round's req/s in the order run. ` +
    `Both nodes are standalone, started with the launch flags of their own bin/idgen-server.js.\n`
  );
}

/** `git -C dir <args>`'s output, trimmed, or `undefined` when git cannot answer (e.g. an exported archive). */
function git(dir: string, args: readonly string[]): string | undefined {
  try {
    return execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

/**
 * What to call a checkout in the report: `name` when given, else its commit (`git log -1`, with how many files
 * differ from it, read without taking git's index lock), else the directory itself.
 */
export function describeCheckout(dir: string, name?: string): string {
  if (name !== undefined) return `${name} (${dir})`;
  const commit = git(dir, ['log', '-1', '--format=%h']);
  if (commit === undefined || commit === '') return dir;
  const changed = git(dir, ['--no-optional-locks', 'status', '--porcelain'])?.split('\n').filter(Boolean).length ?? 0;
  return `${commit}${changed > 0 ? ` + ${changed} uncommitted files` : ''} (${dir})`;
}
