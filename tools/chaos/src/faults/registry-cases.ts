/**
 * Issue 31's registry cases, drawn by the fault `disaster-recovery` beside its restores of a region's etcd
 * (disaster-recovery.ts): each scripted as the operator's steps with the built `idgen`, on a deployment of the fault's
 * own (two region etcds and a registry; a third etcd for case 5), apart from the run's fleet, whose IDs it never
 * meets. The borrowers and the adopter are embedded sources (@idgen/embedded) in this process, on real etcds.
 *
 * - `loan-restore` (case 1): region R borrows spare code 5; R's etcd is snapshotted; 5 is reclaimed and adopted by
 *   region 5, whose adopter mints; R's etcd is restored from the snapshot (same token: its mirror says lent again).
 *   A borrower of R then starts: the fix is that it never claims under the dead loan (the registry says adopted).
 *   Then the runbook's `idgen region restored --registry` seals the dead mirror.
 * - `registry-restore` (case 2): the registry's backup; code 5 lent to R, whose borrower mints; the registry restored
 *   from the backup; `idgen spare lend 5 --to-region S`: the fix is exit 4 (its history went back).
 * - `two-registries` (case 5): code 5 lent to R through the registry, its borrower minting; region S's operator names
 *   another registry (initialised on its own): the fix is exit 4 (not the registry the regions follow).
 *
 * Expected (a SAFETY rule, docs/design.md's deployment invariant): the refusal happened (the borrower refused, the
 * lend exit 4: what shows the fault was applied), no ID handed out by both holders, and the deployment audit clean at
 * the end. On a build without the fixes the step is accepted, the second holder claims the first one's slot (the
 * other workers of code 5 there are held, as busy borrowers would), and both mint: the IDs in common and the audit's
 * overlap are the finding.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { mintTogether, startEtcd, type EtcdServer } from '@idgen/testing';
import { ETCD_PREFIX } from '../fault-context.js';
import {
  auditConfig,
  auditNotes,
  drSafetyViolation,
  holdersBreaches,
  runAudit,
  type AuditOutcome,
  type AuditRegion,
} from './audit.js';
import { cliLine, runOperatorCli, type CliRun } from './double-loan.js';

/** The registry cases (issue 31's cases 1, 2 and 5). */
export const REGISTRY_CASES = ['loan-restore', 'registry-restore', 'two-registries'] as const;

/** One case of {@link REGISTRY_CASES}. */
export type RegistryCase = (typeof REGISTRY_CASES)[number];

/** Issue 31's number of each case. */
export const ISSUE_CASE: Readonly<Record<RegistryCase, number>> = {
  'loan-restore': 1,
  'registry-restore': 2,
  'two-registries': 5,
};

const SPARE = 5;

/** Options of {@link runRegistryCase}. */
export interface RegistryCaseOptions {
  readonly cliMain: string;
  /** The borrowing region R; S is another ordinary code. */
  readonly region: number;
  readonly leaseTtlSeconds: number;
  readonly dir: string;
  readonly index: number;
  /** How long both holders are asked for IDs at most (they stop once each has {@link MINT_TARGET}). */
  readonly overlapMs: number;
  readonly announce: (target: string) => void;
}

/** IDs each holder mints when both hold (then both stop). */
export const MINT_TARGET = 20_000;

/** What one registry case did. */
export interface RegistryCaseOutcome {
  readonly registryCase: RegistryCase;
  /** The operator's setup steps, in order (every one must exit 0). */
  readonly setup: readonly CliRun[];
  /** The step the case is about: the second lend (cases 2, 5), or the borrower's start (case 1, no CLI run). */
  readonly step: CliRun | undefined;
  /** Whether the fix refused: the lend exited 4, or the borrower never claimed under the dead loan. */
  readonly refused: boolean;
  /** Why, in one line (the CLI's or the borrower's). */
  readonly refusal: string;
  readonly first: { readonly name: string; readonly ids: number };
  readonly second: { readonly name: string; readonly ids: number };
  /** IDs handed out by both. */
  readonly common: number;
  readonly audit: AuditOutcome;
  readonly auditFile: string;
  readonly tookMs: number;
}

/** Puts `key` over etcd's gRPC-JSON gateway, under a 600 s lease when `leased` (a holder's worker key). */
async function putKey(url: string, key: string, value: string, leased = false): Promise<void> {
  const b64 = (x: string): string => Buffer.from(x).toString('base64');
  const post = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      body: JSON.stringify(body),
      headers: { 'content-type': 'application/json' },
      signal: AbortSignal.timeout(5000),
    });
    if (!res.ok) throw new Error(`${path} ${key}: HTTP ${res.status}`);
    return (await res.json()) as Record<string, unknown>;
  };
  const lease = leased ? String((await post('/v3/lease/grant', { TTL: 600 }))['ID']) : undefined;
  await post('/v3/kv/put', { key: b64(key), value: b64(value), ...(lease === undefined ? {} : { lease }) });
}

/** Reads `key` over etcd's gRPC-JSON gateway; undefined when absent. */
async function getKey(url: string, key: string): Promise<string | undefined> {
  const res = await fetch(`${url}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: Buffer.from(key).toString('base64') }),
    headers: { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(5000),
  });
  if (!res.ok) throw new Error(`range ${key}: HTTP ${res.status}`);
  const kvs = ((await res.json()) as { kvs?: { value?: string }[] }).kvs;
  const value = kvs?.[0]?.value;
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
}

/** Holds every worker of code 5 in `url` but `worker`: a second borrower there claims `worker`. */
async function onlyFree(url: string, worker: number): Promise<void> {
  for (let w = 0; w <= DEFAULT_LAYOUT.maxWorker; w++)
    if (w !== worker)
      await putKey(url, `${ETCD_PREFIX}/regions/${SPARE}/workers/${w}`, '{"nodeId":"busy","kind":"embedded"}', true);
}

/** Runs one registry case: the deployment, the operator's steps, the holders, the audit. */
export async function runRegistryCase(o: RegistryCaseOptions, c: RegistryCase): Promise<RegistryCaseOutcome> {
  const t0 = Date.now();
  const etcds: EtcdServer[] = [];
  const sources: EmbeddedIdSource[] = [];
  try {
    const d = await CaseDeployment.start(o, c, etcds, sources);
    const step = await CASE_STEPS[c](d);
    return await caseVerdict(d, c, step, t0);
  } finally {
    await Promise.all(sources.map((x) => x.close().catch(() => undefined)));
    await Promise.all(etcds.map((e) => e.stop()));
  }
}

/** The etcds of a case's deployment: region R's, region S's (the adopter's in case 1), the registry, another one. */
interface CaseEtcds {
  readonly er: EtcdServer;
  readonly es: EtcdServer;
  readonly registry: EtcdServer;
  /** Case 5's other registry (started only for it). */
  readonly other: EtcdServer | undefined;
}

/**
 * A case's own deployment, set up by the operator (`region init` of R and S with the TTL ceiling, `spare init`, the
 * layout records, the home slots held): the operator's CLI and the holders a case starts on it.
 */
class CaseDeployment {
  /** The operator's setup steps, in order (every one must exit 0). */
  readonly setup: CliRun[] = [];

  private constructor(
    readonly o: RegistryCaseOptions,
    /** The borrowing region R and the other region S (the adopting spare code in case 1). */
    readonly r: number,
    readonly s: number,
    readonly etcds: CaseEtcds,
    readonly regions: readonly AuditRegion[],
    readonly auditFile: string,
    private readonly sources: EmbeddedIdSource[],
  ) {}

  /** Starts the case's etcds (each pushed to `etcds` for the caller to stop) and runs the operator's setup. */
  static async start(
    o: RegistryCaseOptions,
    c: RegistryCase,
    etcds: EtcdServer[],
    sources: EmbeddedIdSource[],
  ): Promise<CaseDeployment> {
    const r = o.region;
    const s = c === 'loan-restore' ? SPARE : (r % 4) + 1;
    const started = await Promise.all(
      ['r', 's', 'registry', ...(c === 'two-registries' ? ['other'] : [])].map((n) =>
        startEtcd({ name: `reg-${o.index}-${n}`, readyTimeoutMs: 30_000 }),
      ),
    );
    etcds.push(...started);
    const [er, es, registry, other] = started as [EtcdServer, EtcdServer, EtcdServer, EtcdServer | undefined];
    o.announce(
      `case ${ISSUE_CASE[c]} (${c}): region ${r} at ${er.clientUrl}, ${s === SPARE ? 'the adopting region 5' : `region ${s}`} at ${es.clientUrl}, registry ${registry.clientUrl}`,
    );
    const regions: AuditRegion[] = [
      { name: `region-${r}`, etcd: [er.clientUrl], prefix: ETCD_PREFIX },
      { name: `region-${s}`, etcd: [es.clientUrl], prefix: ETCD_PREFIX },
    ];
    const auditFile = join(o.dir, `reg-${o.index}-audit.json`);
    await writeFile(auditFile, auditConfig(regions));
    const d = new CaseDeployment(o, r, s, { er, es, registry, other }, regions, auditFile, sources);
    await d.initRegions();
    return d;
  }

  /** `region init` of R and S, `spare init`, the layout records, and the home slots held. */
  private async initRegions(): Promise<void> {
    const { r, s } = this;
    const { er, es } = this.etcds;
    for (const [code, e] of [
      [r, er],
      [s, es],
    ] as const)
      await this.cli([
        'region',
        'init',
        '--sole-cluster',
        '--region',
        String(code),
        '--etcd',
        e.clientUrl,
        '--lease-ttl-ceiling',
        String(this.o.leaseTtlSeconds),
      ]);
    // A loan term of eight of the borrowers' TTL (four is the shortest they may borrow under): case 1's adopt waits the
    // term out, and a loan no borrower renews yet outlasts the first borrower's start on a busy machine (§7).
    await this.cli(['spare', 'init', ...this.reg(), '--loan-term', String(8 * this.o.leaseTtlSeconds)]);
    for (const e of [er, es])
      await putKey(e.clientUrl, `${ETCD_PREFIX}/layout`, JSON.stringify(DEFAULT_LAYOUT.toRecord()));
    // Region R's home slot 0 is held (a borrower with home range 0-0 then claims under the spare code).
    await putKey(er.clientUrl, `${ETCD_PREFIX}/regions/${r}/workers/0`, '{"nodeId":"home","kind":"service"}', true);
    if (s !== SPARE)
      await putKey(es.clientUrl, `${ETCD_PREFIX}/regions/${s}/workers/0`, '{"nodeId":"home","kind":"service"}', true);
  }

  /** Runs `idgen ARGS`; a `must` step is a setup step: recorded, and it must exit 0. */
  async cli(args: readonly string[], must = true): Promise<CliRun> {
    const run = await runOperatorCli(this.o.cliMain, [...args, '--timeout-ms', '5000'], 60_000);
    if (must) {
      this.setup.push(run);
      if (run.code !== 0) throw new Error(`setup step idgen ${args.join(' ')}: ${cliLine(run)}`);
    }
    return run;
  }

  /** The registry flags: `at` (default the registry the regions follow) and the deployment file. */
  reg(at: EtcdServer = this.etcds.registry): string[] {
    return ['--registry', at.clientUrl, '--config', this.auditFile];
  }

  /**
   * `idgen spare lend 5 --to-region TO` on `e`, through the registry `at`. A setup lend (`must`) then waits, as the
   * runbook says, until the time the CLI printed for the loan's first claims (a loan term and a quarter: docs/design.md
   * §7, "Loan terms").
   */
  async lend(to: number, e: EtcdServer, at?: EtcdServer, must = true): Promise<CliRun> {
    const run = await this.cli(
      ['spare', 'lend', String(SPARE), '--to-region', String(to), '--etcd', e.clientUrl, ...this.reg(at)],
      must,
    );
    if (must) await sleep(Math.max(0, firstClaimsAt(run) - Date.now()));
    return run;
  }

  /** An embedded holder of `region` on `e` (a borrower through `borrowFrom`'s registry when given), not yet ready. */
  source(e: EtcdServer, region: number, name: string, borrowFrom?: EtcdServer, workers = '0-0'): EmbeddedIdSource {
    const src = createEmbeddedIdSource({
      etcd: { endpoints: [e.clientUrl] },
      region,
      workers,
      nodeId: `chaos-reg-${this.o.index}-${name}`,
      ttlSeconds: this.o.leaseTtlSeconds,
      timeSource: 'none',
      slotWaitMs: 2000 * this.o.leaseTtlSeconds,
      ...(borrowFrom === undefined ? {} : { borrowSpare: true, registry: { endpoints: [borrowFrom.clientUrl] } }),
    });
    this.sources.push(src);
    return src;
  }

  /** Closes every holder started so far (before the audit reads their records). */
  async closeSources(): Promise<void> {
    await Promise.all(this.sources.splice(0).map((x) => x.close().catch(() => undefined)));
  }
}

/**
 * When a lend's borrowers may first claim, as `idgen spare lend` printed it ("borrowers may first claim under it from
 * ISO"); now when it printed none (a loan claimable at once). A time more than an hour away is refused: not a term.
 */
export function firstClaimsAt(run: CliRun): number {
  const m = /^borrowers may first claim under it from (\S+Z) /m.exec(run.stdout.join('\n'));
  if (m === null) return Date.now();
  const at = Date.parse(m[1] as string);
  if (!Number.isFinite(at) || at - Date.now() > 3_600_000)
    throw new Error(`idgen spare lend printed a first-claim time that is not one: ${m[0]}`);
  return at;
}

/** Why `src` never became ready, or undefined when it did. */
function readyOrWhy(src: EmbeddedIdSource): Promise<string | undefined> {
  return src.ready().then(
    () => undefined,
    (e: unknown) => (e as Error).message,
  );
}

/** What a case's step left: whether the fix refused, and the two holders (the second only if it got to start). */
interface CaseStep {
  /** The second lend (cases 2, 5); case 1's step is the borrower's start (no CLI run). */
  readonly step: CliRun | undefined;
  readonly refused: boolean;
  readonly refusal: string;
  readonly names: readonly [string, string];
  readonly first: EmbeddedIdSource;
  readonly second: EmbeddedIdSource | undefined;
}

/**
 * Case 1: R borrows 5; R's etcd is snapshotted; 5 is reclaimed and adopted by region 5; R's etcd is restored (its
 * mirror says lent again); R's borrower then starts: the fix is that it never claims under the dead loan.
 */
async function loanRestore(d: CaseDeployment): Promise<CaseStep> {
  const { o, r } = d;
  const { er, es, registry } = d.etcds;
  await d.lend(r, er);
  const snapshot = join(o.dir, `reg-${o.index}-r.db`);
  await er.snapshot(snapshot);
  const handover = join(o.dir, `reg-${o.index}-handover.json`);
  await d.cli([
    'spare',
    'reclaim',
    String(SPARE),
    '--handover',
    handover,
    '--etcd',
    er.clientUrl,
    '--wait-ms',
    '0',
    ...d.reg(),
  ]);
  await d.cli(['spare', 'adopt', String(SPARE), '--handover', handover, '--etcd', es.clientUrl, ...d.reg()]);
  await er.restore(snapshot);
  // The fault is applied only if the restore brought the dead loan back: the mirror says lent to R again.
  const mirror = await getKey(er.clientUrl, `${ETCD_PREFIX}/spare-codes/${SPARE}`);
  if (mirror === undefined || !/"state":"lent"/.test(mirror))
    throw new Error(`the restored etcd's ${ETCD_PREFIX}/spare-codes/${SPARE} is not lent: ${mirror ?? 'absent'}`);
  const first = d.source(er, r, 'borrower', registry);
  const why = await readyOrWhy(first);
  const refused = why !== undefined;
  const refusal = why ?? `the borrower claimed ${SPARE}/${String(first.status().worker)} under the dead loan`;
  // The adopter on the borrower's worker when it claimed (the slot both would mint under), else on worker 0.
  const worker = String(first.status().worker);
  const second = d.source(es, SPARE, 'adopter', undefined, refused ? '0-0' : `${worker}-${worker}`);
  await second.ready();
  return { step: undefined, refused, refusal, names: ['borrower', 'adopter'], first, second };
}

/** Case 2: the registry's backup; 5 lent to R, whose borrower mints; the registry restored; 5 lent to S. */
async function registryRestore(d: CaseDeployment): Promise<CaseStep> {
  const { o } = d;
  const { registry } = d.etcds;
  const backup = join(o.dir, `reg-${o.index}-registry.db`);
  await registry.snapshot(backup);
  const first = await firstBorrower(d);
  await registry.restore(backup);
  return secondLend(d, first, registry);
}

/** Case 5: 5 lent to R, whose borrower mints; S's operator initialises another registry and lends 5 through it. */
async function twoRegistries(d: CaseDeployment): Promise<CaseStep> {
  const { o } = d;
  const first = await firstBorrower(d);
  const at = d.etcds.other as EtcdServer;
  // Region S's operator initialises the other registry on its own (spare init with region S alone).
  const alone = join(o.dir, `reg-${o.index}-alone.json`);
  await writeFile(alone, auditConfig([d.regions[1] as AuditRegion]));
  await d.cli(
    ['spare', 'init', '--registry', at.clientUrl, '--config', alone, '--loan-term', String(8 * o.leaseTtlSeconds)],
    false,
  );
  return secondLend(d, first, at);
}

/** Cases 2 and 5: 5 lent to R through the registry, and R's borrower minting under it. */
async function firstBorrower(d: CaseDeployment): Promise<EmbeddedIdSource> {
  await d.lend(d.r, d.etcds.er);
  const first = d.source(d.etcds.er, d.r, `r${d.r}`, d.etcds.registry);
  await first.ready();
  return first;
}

/**
 * Cases 2 and 5: `idgen spare lend 5 --to-region S` through registry `at` (the fix: exit 4); if it is accepted, S's
 * borrower on the one worker of 5 left free, R's borrower's.
 */
async function secondLend(d: CaseDeployment, first: EmbeddedIdSource, at: EtcdServer): Promise<CaseStep> {
  const names = [`r${d.r}`, `r${d.s}`] as const;
  const step = await d.lend(d.s, d.etcds.es, at, false);
  let refusal = cliLine(step);
  let second: EmbeddedIdSource | undefined;
  if (step.code === 0) {
    await onlyFree(d.etcds.es.clientUrl, first.status().worker as number);
    second = d.source(d.etcds.es, d.s, names[1], at);
    const why = await readyOrWhy(second);
    if (why !== undefined) refusal += `; the second borrower: ${why}`;
  }
  return { step, refused: step.code === 4, refusal, names, first, second };
}

/** Each case's scripted steps. */
const CASE_STEPS: Readonly<Record<RegistryCase, (d: CaseDeployment) => Promise<CaseStep>>> = {
  'loan-restore': loanRestore,
  'registry-restore': registryRestore,
  'two-registries': twoRegistries,
};

/**
 * The shared end of every case: both holders mint together (when both hold), they close, case 1's runbook step
 * (`region restored --registry`) after a refusal, and the deployment audit.
 */
async function caseVerdict(d: CaseDeployment, c: RegistryCase, x: CaseStep, t0: number): Promise<RegistryCaseOutcome> {
  const { first, second } = x;
  let counts: [number, number, number] = [0, 0, 0];
  if (second !== undefined && second.status().worker !== undefined && first.status().worker !== undefined) {
    const m = await mintTogether(first, second, { atLeast: MINT_TARGET, withinMs: d.o.overlapMs });
    counts = [m.first, m.second, m.common];
  } else counts = [first.tryNextId() === undefined ? 0 : 1, second?.tryNextId() === undefined ? 0 : 1, 0];
  await d.closeSources();
  // Case 1's runbook step after a restore: the registry decides each mirrored loan; a dead one is sealed.
  if (c === 'loan-restore' && x.refused)
    await d.cli([
      'region',
      'restored',
      '--region',
      String(d.r),
      '--etcd',
      d.etcds.er.clientUrl,
      '--lease-ttl',
      String(d.o.leaseTtlSeconds),
      '--registry',
      d.etcds.registry.clientUrl,
    ]);
  const audit = await runAudit({ regions: d.regions, timeoutMs: 5000 });
  return {
    registryCase: c,
    setup: d.setup,
    step: x.step,
    refused: x.refused,
    refusal: x.refusal,
    first: { name: x.names[0], ids: counts[0] },
    second: { name: x.names[1], ids: counts[1] },
    common: counts[2],
    audit,
    auditFile: d.auditFile,
    tookMs: Date.now() - t0,
  };
}

/** Judges one registry case: the refusal happened, 0 IDs in common and the audit clean; else what broke. */
export function judgeRegistryCase(d: RegistryCaseOutcome): {
  notes: string[];
  safetyViolation: string | undefined;
  expectationMissed: string | undefined;
} {
  const notes = [
    ...d.setup.map((run) => `setup: idgen ${run.args.slice(0, 2).join(' ')}: ${cliLine(run)}`),
    `the step: ${d.refused ? 'refused' : 'accepted'}: ${d.refusal}`,
    `${d.first.name}: ${d.first.ids.toLocaleString('en-US')} IDs; ${d.second.name}: ${d.second.ids.toLocaleString('en-US')} IDs`,
    `IDs handed out by both: ${d.common.toLocaleString('en-US')}`,
    ...auditNotes(d.audit, d.auditFile, d.tookMs),
  ];
  const unsafe = holdersBreaches(d.common, d.first.name, d.second.name, d.audit);
  if (!d.refused) unsafe.push(`the step was accepted (${d.refusal})`);
  return {
    notes,
    safetyViolation: drSafetyViolation(d.registryCase, ISSUE_CASE[d.registryCase], unsafe),
    expectationMissed: undefined,
  };
}
