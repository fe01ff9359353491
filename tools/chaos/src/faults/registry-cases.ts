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
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { startEtcd, type EtcdServer } from '@idgen/testing';
import { ETCD_PREFIX } from '../fault-context.js';
import { auditConfig, runAudit, type AuditOutcome, type AuditRegion } from './audit.js';
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

/** Both mint until each has {@link MINT_TARGET} IDs or `ms` pass; the count of IDs both handed out. */
async function mintTogether(a: EmbeddedIdSource, b: EmbeddedIdSource, ms: number): Promise<[number, number, number]> {
  const [x, y] = [new Set<bigint>(), new Set<bigint>()];
  const end = Date.now() + ms;
  while (Date.now() < end && (x.size < MINT_TARGET || y.size < MINT_TARGET)) {
    for (const [s, ids] of [
      [a, x],
      [b, y],
    ] as const)
      for (let k = 0; k < 256; k++) {
        const id = s.tryNextId();
        if (id === undefined) break;
        ids.add(id);
      }
    await new Promise((r) => setImmediate(r));
  }
  let common = 0;
  for (const id of y) if (x.has(id)) common++;
  return [x.size, y.size, common];
}

/** Runs one registry case: the deployment, the operator's steps, the holders, the audit. */
export async function runRegistryCase(o: RegistryCaseOptions, c: RegistryCase): Promise<RegistryCaseOutcome> {
  const t0 = Date.now();
  const etcds: EtcdServer[] = [];
  const sources: EmbeddedIdSource[] = [];
  const r = o.region;
  const s = c === 'loan-restore' ? SPARE : (r % 4) + 1;
  try {
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
    const setup: CliRun[] = [];
    const cli = async (args: readonly string[], must = true): Promise<CliRun> => {
      const run = await runOperatorCli(o.cliMain, [...args, '--timeout-ms', '5000'], 60_000);
      if (must) {
        setup.push(run);
        if (run.code !== 0) throw new Error(`setup step idgen ${args.join(' ')}: ${cliLine(run)}`);
      }
      return run;
    };
    const reg = (at: EtcdServer = registry): string[] => ['--registry', at.clientUrl, '--config', auditFile];
    for (const [code, e] of [
      [r, er],
      [s, es],
    ] as const)
      await cli([
        'region',
        'init',
        '--region',
        String(code),
        '--etcd',
        e.clientUrl,
        '--lease-ttl-ceiling',
        String(o.leaseTtlSeconds),
      ]);
    await cli(['spare', 'init', ...reg()]);
    for (const e of [er, es])
      await putKey(e.clientUrl, `${ETCD_PREFIX}/layout`, JSON.stringify(DEFAULT_LAYOUT.toRecord()));
    // Region R's home slot 0 is held (a borrower with home range 0-0 then claims under the spare code).
    await putKey(er.clientUrl, `${ETCD_PREFIX}/regions/${r}/workers/0`, '{"nodeId":"home","kind":"service"}', true);
    if (s !== SPARE)
      await putKey(es.clientUrl, `${ETCD_PREFIX}/regions/${s}/workers/0`, '{"nodeId":"home","kind":"service"}', true);
    const source = (e: EtcdServer, region: number, name: string, borrowFrom?: EtcdServer, workers = '0-0') => {
      const src = createEmbeddedIdSource({
        etcd: { endpoints: [e.clientUrl] },
        region,
        workers,
        nodeId: `chaos-reg-${o.index}-${name}`,
        ttlSeconds: o.leaseTtlSeconds,
        timeSource: 'none',
        slotWaitMs: 2000 * o.leaseTtlSeconds,
        ...(borrowFrom === undefined ? {} : { borrowSpare: true, registry: { endpoints: [borrowFrom.clientUrl] } }),
      });
      sources.push(src);
      return src;
    };
    const readyOrWhy = (src: EmbeddedIdSource): Promise<string | undefined> =>
      src.ready().then(
        () => undefined,
        (e: unknown) => (e as Error).message,
      );
    const lend = (to: number, e: EtcdServer, at?: EtcdServer, must = true) =>
      cli(['spare', 'lend', String(SPARE), '--to-region', String(to), '--etcd', e.clientUrl, ...reg(at)], must);

    let step: CliRun | undefined;
    let refused: boolean;
    let refusal: string;
    let first: EmbeddedIdSource;
    let second: EmbeddedIdSource | undefined;
    let names: [string, string];
    if (c === 'loan-restore') {
      await lend(r, er);
      const snapshot = join(o.dir, `reg-${o.index}-r.db`);
      await er.snapshot(snapshot);
      const handover = join(o.dir, `reg-${o.index}-handover.json`);
      await cli([
        'spare',
        'reclaim',
        String(SPARE),
        '--handover',
        handover,
        '--etcd',
        er.clientUrl,
        '--wait-ms',
        '0',
        ...reg(),
      ]);
      await cli(['spare', 'adopt', String(SPARE), '--handover', handover, '--etcd', es.clientUrl, ...reg()]);
      await er.restore(snapshot);
      // The fault is applied only if the restore brought the dead loan back: the mirror says lent to R again.
      const mirror = await getKey(er.clientUrl, `${ETCD_PREFIX}/spare-codes/${SPARE}`);
      if (mirror === undefined || !/"state":"lent"/.test(mirror))
        throw new Error(`the restored etcd's ${ETCD_PREFIX}/spare-codes/${SPARE} is not lent: ${mirror ?? 'absent'}`);
      names = ['borrower', 'adopter'];
      first = source(er, r, 'borrower', registry);
      const why = await readyOrWhy(first);
      refused = why !== undefined;
      refusal = why ?? `the borrower claimed ${SPARE}/${String(first.status().worker)} under the dead loan`;
      // The adopter on the borrower's worker when it claimed (the slot both would mint under), else on worker 0.
      second = source(
        es,
        SPARE,
        'adopter',
        undefined,
        refused ? '0-0' : `${String(first.status().worker)}-${String(first.status().worker)}`,
      );
      await second.ready();
    } else {
      const backup = join(o.dir, `reg-${o.index}-registry.db`);
      if (c === 'registry-restore') await registry.snapshot(backup);
      await lend(r, er);
      names = [`r${r}`, `r${s}`];
      first = source(er, r, names[0], registry);
      await first.ready();
      let at = registry;
      if (c === 'registry-restore') await registry.restore(backup);
      else {
        at = other as EtcdServer;
        // Region S's operator initialises the other registry on its own (spare init with region S alone).
        const alone = join(o.dir, `reg-${o.index}-alone.json`);
        await writeFile(alone, auditConfig([regions[1] as AuditRegion]));
        step = await cli(['spare', 'init', '--registry', at.clientUrl, '--config', alone], false);
      }
      step = await lend(s, es, at, false);
      refused = step.code === 4;
      refusal = cliLine(step);
      if (step.code === 0) {
        await onlyFree(es.clientUrl, first.status().worker as number);
        second = source(es, s, names[1], at);
        const why = await readyOrWhy(second);
        if (why !== undefined) refusal += `; the second borrower: ${why}`;
      }
    }
    let counts: [number, number, number] = [0, 0, 0];
    if (second !== undefined && second.status().worker !== undefined && first.status().worker !== undefined)
      counts = await mintTogether(first, second, o.overlapMs);
    else counts = [first.tryNextId() === undefined ? 0 : 1, second?.tryNextId() === undefined ? 0 : 1, 0];
    await Promise.all(sources.splice(0).map((x) => x.close().catch(() => undefined)));
    // Case 1's runbook step after a restore: the registry decides each mirrored loan; a dead one is sealed.
    if (c === 'loan-restore' && refused)
      await cli([
        'region',
        'restored',
        '--region',
        String(r),
        '--etcd',
        er.clientUrl,
        '--lease-ttl',
        String(o.leaseTtlSeconds),
        '--registry',
        registry.clientUrl,
      ]);
    const audit = await runAudit({ regions, timeoutMs: 5000 });
    return {
      registryCase: c,
      setup,
      step,
      refused,
      refusal,
      first: { name: names[0], ids: counts[0] },
      second: { name: names[1], ids: counts[1] },
      common: counts[2],
      audit,
      auditFile,
      tookMs: Date.now() - t0,
    };
  } finally {
    await Promise.all(sources.map((x) => x.close().catch(() => undefined)));
    await Promise.all(etcds.map((e) => e.stop()));
  }
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
    ...d.audit.lines,
    `audit deployment file: ${d.auditFile}`,
    `took ${(d.tookMs / 1000).toFixed(1)} s`,
  ];
  const unsafe: string[] = [];
  if (d.common > 0)
    unsafe.push(`${d.common.toLocaleString('en-US')} ID(s) handed out by both ${d.first.name} and ${d.second.name}`);
  if (!d.audit.ok) unsafe.push(`the audit is not clean (${d.audit.lines[0] ?? ''})`);
  if (!d.refused) unsafe.push(`the step was accepted (${d.refusal})`);
  return {
    notes,
    safetyViolation:
      unsafe.length === 0
        ? undefined
        : `disaster recovery (${d.registryCase}, issue 31 case ${ISSUE_CASE[d.registryCase]}) broke the deployment's invariant: ${unsafe.join('; ')}`,
    expectationMissed: undefined,
  };
}
