/**
 * Fault `double-loan` (issue 21, case 2 and item 9; docs/design.md §7, the spare-code registry): an operator lends
 * one spare code to two regions through their two etcds. Within the window the fault starts a registry etcd and a
 * second region's etcd (bound to another code with `idgen region init`), then, with the operator's CLI, lends code 5
 * to the run's region in the run's etcd and lends it again to the other region in the other etcd, both naming the
 * same registry. Before the registry, "a code is lent once" was checked inside one etcd: both lends succeeded and
 * both regions' borrowers minted under code 5. Expected now (a SAFETY rule): the second lend exits 1 with a line
 * naming the loan, and neither etcd's mirror (`{prefix}/spare-codes/5`) records the code lent to the other region.
 * The fault then reclaims the code from the run's region, so the run goes on as before, and removes the other etcd
 * (the registry stays for the run's next double loan, with the next spare code).
 *
 * A CLI without `--registry` (the code before the registry) is asked again without it: its answers are the finding.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnProcess, startEtcd, type EtcdServer } from '@idgen/testing';
import { ETCD_PREFIX, type FaultHandler } from '../fault-context.js';
import { wrongRegionOf } from './wrong-region-node.js';

/** The spare codes a run lends, one per `double-loan` fault in turn (the layout's default spare codes). */
export const SPARE_CODES = [5, 6, 7] as const;

/** One run of the operator's CLI. */
export interface CliRun {
  readonly args: readonly string[];
  /** Exit code (null: ended by a signal, e.g. stopped after its time limit). */
  readonly code: number | null;
  readonly stdout: readonly string[];
  readonly stderr: readonly string[];
}

/** Runs `node cliMain ARGS`, stopped (SIGTERM, then SIGKILL) after `timeoutMs`: nothing the fault starts may hang. */
export async function runOperatorCli(cliMain: string, args: readonly string[], timeoutMs: number): Promise<CliRun> {
  const handle = spawnProcess(process.execPath, [cliMain, ...args]);
  const limit = setTimeout(() => void handle.stop(2000), timeoutMs);
  const exit = await handle.exited;
  clearTimeout(limit);
  return { args, code: exit.code, stdout: [...handle.stdoutLines], stderr: [...handle.stderrLines] };
}

/** A CLI that does not know a flag or a verb (commander's answer, exit 2): an older build of `idgen`. */
export function unknownToCli(run: CliRun, what = /./): boolean {
  return run.code === 2 && run.stderr.some((l) => /unknown (option|command)/.test(l) && what.test(l));
}

/** One line of a CLI run for the report: `exit N: first line of stderr (or stdout)`. */
export function cliLine(run: CliRun): string {
  // A success says it on stdout (progress goes to stderr); a refusal on stderr.
  const [first, then] = run.code === 0 ? [run.stdout, run.stderr] : [run.stderr, run.stdout];
  const text = (first.find((l) => l.trim() !== '') ?? then.find((l) => l.trim() !== '') ?? '').trim();
  return `exit ${run.code ?? 'signal'}${text === '' ? '' : `: ${text.length > 200 ? `${text.slice(0, 200)}…` : text}`}`;
}

/** A spare-code mirror as an etcd records it (`{prefix}/spare-codes/{code}`); undefined when absent. */
export interface SpareMirror {
  readonly state: string;
  readonly lentTo: number | undefined;
}

/**
 * Reads `{prefix}/spare-codes/{code}` from a plaintext etcd over its gRPC-JSON gateway: the record, `null` when absent,
 * `undefined` when no member answered (or the value is not a record).
 */
export async function readSpareMirror(
  endpoints: readonly string[],
  prefix: string,
  code: number,
): Promise<SpareMirror | null | undefined> {
  const key = Buffer.from(`${prefix}/spare-codes/${code}`).toString('base64');
  for (const e of endpoints) {
    try {
      const res = await fetch(`${e}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key }),
        headers: { 'content-type': 'application/json' },
        signal: AbortSignal.timeout(2000),
      });
      const body = (await res.json()) as { header?: unknown; kvs?: { value?: string }[] };
      if (body.header === undefined) continue;
      const raw = body.kvs?.[0]?.value;
      if (raw === undefined) return null;
      const r = JSON.parse(Buffer.from(raw, 'base64').toString('utf8')) as { state?: unknown; lentTo?: unknown };
      return { state: String(r.state), lentTo: typeof r.lentTo === 'number' ? r.lentTo : undefined };
    } catch {
      // next member
    }
  }
  return undefined;
}

/** Options of {@link runDoubleLoan}. */
export interface DoubleLoanOptions {
  /** The operator's `idgen` (apps/cli/dist/main.js of the build under test). */
  readonly cliMain: string;
  /** The run's etcd members (straight, not through a node's link). */
  readonly runEtcd: readonly string[];
  readonly region: number;
  /** The second region's code (bound in the second etcd). */
  readonly otherRegion: number;
  readonly code: number;
  readonly prefix: string;
  /** Where the handover file goes. */
  readonly dir: string;
  readonly leaseTtlSeconds: number;
  /** Each CLI run's limit. */
  readonly timeoutMs: number;
  /** Called once the extra etcds run (for the fault's target line). */
  readonly announce: (target: string) => void;
}

/** What the operator's CLI answered, step by step. */
export interface DoubleLoanOutcome {
  readonly code: number;
  readonly region: number;
  readonly otherRegion: number;
  /** The CLI takes `--registry` (false: the code before the registry; the lends ran without it). */
  readonly registry: boolean;
  /** `region init` of the other etcd (undefined: the CLI has no such verb). */
  readonly otherInit: CliRun | undefined;
  readonly first: CliRun;
  readonly second: CliRun | undefined;
  /** The mirrors after both lends (undefined: the etcd did not answer; null: no record). */
  readonly runMirror: SpareMirror | null | undefined;
  readonly otherMirror: SpareMirror | null | undefined;
  readonly reclaim: CliRun | undefined;
  readonly tookMs: number;
}

/**
 * The run's spare-code registry: one etcd per run's etcd, started by its first double loan and kept until the run's
 * cleanup (`cleanupAll`), because a region's etcd follows one registry for good (docs/design.md §7: its mirrors are
 * tied to that registry's cluster; another registry is refused).
 */
const registries = new Map<string, Promise<EtcdServer>>();

function registryOf(runEtcd: readonly string[]): Promise<EtcdServer> {
  const key = runEtcd.join(',');
  let r = registries.get(key);
  if (r === undefined) {
    r = startEtcd({ name: 'registry', readyTimeoutMs: 30_000 });
    r.catch(() => registries.delete(key));
    registries.set(key, r);
  }
  return r;
}

/** Starts (or reuses) the registry, starts the other region's etcd, lends twice, reads both mirrors, reclaims; removes the other etcd. */
export async function runDoubleLoan(o: DoubleLoanOptions): Promise<DoubleLoanOutcome> {
  const t0 = Date.now();
  const started: EtcdServer[] = [];
  try {
    const [registryEtcd, otherEtcd] = await Promise.all([
      registryOf(o.runEtcd),
      startEtcd({ name: `region-${o.otherRegion}`, readyTimeoutMs: 30_000 }),
    ]);
    started.push(otherEtcd);
    o.announce(
      `spare code ${o.code}: region ${o.region} (the run's etcd) and region ${o.otherRegion} (${otherEtcd.clientUrl}), registry ${registryEtcd.clientUrl}`,
    );
    const cli = (args: readonly string[]): Promise<CliRun> => runOperatorCli(o.cliMain, args, o.timeoutMs);
    const timeout = ['--timeout-ms', '5000'];
    const bind = ['region', 'init', '--region', String(o.otherRegion), '--etcd', otherEtcd.clientUrl, ...timeout];
    let otherInit: CliRun | undefined = await cli([...bind, '--sole-cluster']);
    // A CLI before --sole-cluster binds without it; one before the region binding has nothing to bind.
    if (unknownToCli(otherInit, /sole-cluster/)) otherInit = await cli(bind);
    if (unknownToCli(otherInit)) otherInit = undefined;
    // The deployment file (both regions' etcds) that lend and reclaim read before they write, and the registry's
    // deployment ID (idgen spare init, run again harmlessly). A CLI before them knows neither: both are left out.
    const deploymentFile = join(o.dir, `double-loan-code-${o.code}-deployment.json`);
    writeFileSync(
      deploymentFile,
      JSON.stringify({
        regions: [
          { name: `r${o.region}`, etcd: [...o.runEtcd], prefix: o.prefix },
          { name: `r${o.otherRegion}`, etcd: [otherEtcd.clientUrl], prefix: o.prefix },
        ],
      }),
    );
    const init = await cli([
      'spare',
      'init',
      '--registry',
      registryEtcd.clientUrl,
      '--config',
      deploymentFile,
      ...timeout,
    ]);
    const withDeployment = !unknownToCli(init);
    const registryFlags = [
      '--registry',
      registryEtcd.clientUrl,
      ...(withDeployment ? ['--config', deploymentFile] : []),
    ];
    const lend = (to: number, etcd: readonly string[], withRegistry: boolean): Promise<CliRun> =>
      cli([
        'spare',
        'lend',
        String(o.code),
        '--to-region',
        String(to),
        '--etcd',
        etcd.join(','),
        ...(withRegistry ? registryFlags : []),
        ...timeout,
      ]);
    let registry = true;
    let first = await lend(o.region, o.runEtcd, true);
    if (unknownToCli(first, /registry/)) {
      registry = false;
      first = await lend(o.region, o.runEtcd, false);
    }
    const second = first.code === 0 ? await lend(o.otherRegion, [otherEtcd.clientUrl], registry) : undefined;
    const runMirror = await readSpareMirror(o.runEtcd, o.prefix, o.code);
    const otherMirror = await readSpareMirror([otherEtcd.clientUrl], o.prefix, o.code);
    // Back as before: no slot is held under the code in the run's region (no borrower there), so this is quick.
    const reclaim =
      first.code === 0
        ? await cli([
            'spare',
            'reclaim',
            String(o.code),
            '--handover',
            join(o.dir, `double-loan-code-${o.code}-handover.json`),
            '--etcd',
            o.runEtcd.join(','),
            ...(registry ? registryFlags : []),
            '--lease-ttl',
            String(o.leaseTtlSeconds),
            '--wait-ms',
            '10000',
            ...timeout,
          ])
        : undefined;
    return {
      code: o.code,
      region: o.region,
      otherRegion: o.otherRegion,
      registry,
      otherInit,
      first,
      second,
      runMirror,
      otherMirror,
      reclaim,
      tookMs: Date.now() - t0,
    };
  } finally {
    await Promise.all(started.map((e) => e.stop()));
  }
}

/**
 * The `nth` (0-based) double loan of a run: one spare code each, in turn. A reclaimed code is never lent again (§7),
 * so past the third there is none left in the run's etcd: that fault only says so.
 */
export async function doubleLoanFault(o: Omit<DoubleLoanOptions, 'code'>, nth: number): Promise<DoubleLoanJudgement> {
  const code = SPARE_CODES[nth];
  if (code === undefined)
    return {
      notes: [`spare codes ${SPARE_CODES.join(', ')} were lent and reclaimed in this run already: none left to lend`],
      safetyViolation: undefined,
      expectationMissed: undefined,
    };
  return judgeDoubleLoan(await runDoubleLoan({ ...o, code }));
}

/** What the report says about one double loan: its notes, a broken safety rule, a missed expectation. */
export interface DoubleLoanJudgement {
  readonly notes: string[];
  /** The code lent to two regions (or recorded so): the safety rule "a loan is made once" (docs/design.md §7). */
  readonly safetyViolation: string | undefined;
  /** The fault could not do what it should (a first lend or the reclaim failed, an etcd did not answer). */
  readonly expectationMissed: string | undefined;
}

function describeMirror(m: SpareMirror | null | undefined): string {
  if (m === undefined) return 'unknown (etcd did not answer)';
  if (m === null) return 'no record';
  return `${m.state}${m.lentTo === undefined ? '' : ` to region ${m.lentTo}`}`;
}

/**
 * The judgement of one double loan. Safety: the second lend refused (exit 1, or 4 when the run's etcd's mirror
 * refuses it through the deployment file; a line naming the loan to the run's region) and no mirror records the code lent to the other region. The rest (first lend, reclaim, the other etcd's
 * binding) are the fault's own expectations.
 */
export function judgeDoubleLoan(d: DoubleLoanOutcome): DoubleLoanJudgement {
  const c = d.code;
  // Refused by the registry (exit 1), or by the run's etcd's mirror read through the deployment file (exit 4).
  const namesLoan = new RegExp(
    `spare code ${c} is lent to region ${d.region}\\b|says spare code ${c} is lent \\(lent to region ${d.region}\\)`,
  );
  const notes = [
    d.registry
      ? `CLI takes --registry`
      : 'the CLI has no --registry (the code before the spare-code registry): both lends ran without it',
    `region init ${d.otherRegion} on the other etcd: ${d.otherInit === undefined ? 'no such verb in this CLI' : cliLine(d.otherInit)}`,
    `lend ${c} to region ${d.region} (the run's etcd): ${cliLine(d.first)}`,
    `lend ${c} to region ${d.otherRegion} (the other etcd, same registry): ${d.second === undefined ? 'not tried' : cliLine(d.second)}`,
    `mirrors: run's etcd ${describeMirror(d.runMirror)}; other etcd ${describeMirror(d.otherMirror)}`,
    `reclaim ${c} from region ${d.region}: ${d.reclaim === undefined ? 'not tried' : cliLine(d.reclaim)}`,
    `took ${(d.tookMs / 1000).toFixed(1)} s`,
  ];
  const lentToOther = (m: SpareMirror | null | undefined): boolean =>
    m !== null && m !== undefined && m.lentTo === d.otherRegion && m.state !== 'reclaimed';
  const unsafe: string[] = [];
  if (d.second !== undefined) {
    if (d.second.code === 0) unsafe.push(`the second lend (to region ${d.otherRegion}) succeeded (exit 0)`);
    else if ((d.second.code !== 1 && d.second.code !== 4) || !d.second.stderr.some((l) => namesLoan.test(l)))
      unsafe.push(`the second lend was not refused as a loan to region ${d.region} (${cliLine(d.second)})`);
  }
  if (lentToOther(d.runMirror)) unsafe.push(`the run's etcd records code ${c} lent to region ${d.otherRegion}`);
  if (lentToOther(d.otherMirror))
    unsafe.push(`region ${d.otherRegion}'s etcd records code ${c} ${describeMirror(d.otherMirror)}`);
  const missed: string[] = [];
  if (d.first.code !== 0) missed.push(`the first lend failed (${cliLine(d.first)})`);
  if (d.otherInit !== undefined && d.otherInit.code !== 0)
    missed.push(`region init of the other etcd failed (${cliLine(d.otherInit)})`);
  if (d.runMirror === undefined || d.otherMirror === undefined) missed.push('an etcd did not answer for its mirror');
  if (d.reclaim !== undefined && d.reclaim.code !== 0) missed.push(`the reclaim failed (${cliLine(d.reclaim)})`);
  return {
    notes,
    safetyViolation:
      unsafe.length === 0
        ? undefined
        : `spare code ${c} lent twice (to regions ${d.region} and ${d.otherRegion}): ${unsafe.join('; ')}`,
    expectationMissed: missed.length === 0 ? undefined : missed.join('; '),
  };
}

/** Fault `double-loan`'s handler: the run's parts into {@link doubleLoanFault}, its judgement into the record. */
export const doubleLoan: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const { o } = run;
  const nth = run.records.filter((x) => x.fault.kind === 'double-loan').length - 1;
  const announce = (target: string): void => void ((r.target = target), c.line());
  const common = { runEtcd: run.cluster.endpoints, region: o.region, prefix: ETCD_PREFIX, dir: run.dir, announce };
  const j = await doubleLoanFault(
    {
      ...common,
      cliMain: run.operatorCli,
      otherRegion: wrongRegionOf(o.region),
      leaseTtlSeconds: o.leaseTtlSeconds,
      timeoutMs: 30_000,
    },
    nth,
  );
  Object.assign(r, { safetyViolation: j.safetyViolation, expectationMissed: j.expectationMissed }).notes.push(
    ...j.notes,
  );
};
