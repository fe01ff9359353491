// `idgen audit` after issue 31's registry cases, on the records real holders leave (docs/design.md §8, "Registry
// threats"; docs/runbook.md "Auditing a deployment"): case 1, a borrower's etcd restored after its loan moved on;
// case 2, the registry restored from a backup, then the code lent again elsewhere; case 5, two registries during a
// split. Real etcds (each region's, the registry's), real `etcdctl snapshot save`/`restore`, real embedded sources
// (@idgen/embedded, in this process) as the borrowers and the adopter, and the built `idgen` for the operator's steps
// and the audit.
//
// How the duplicates are made, honestly: on this code every case is refused or mints nothing (that is the fix), so
// each case runs twice. "Without the fix" turns the fixes off in this process through a test-only route, jest.mock of
// the lease's own modules (nothing in the shipped code can be switched): `confirmLoan` (loan-confirmation.ts) confirms
// every loan, as a claim did before it asked the registry, and `guardRegistryStep` (registry-guard.ts) only reads the
// registry, as a lend did before the registry's identity and history were checked. Those steps then run in this
// process (the library functions the CLI calls); the holders mint real, equal IDs, and the audit (the built CLI, its
// own process, nothing mocked) must name both holders, the slot and the milliseconds, exit 1. "With the fix" runs the
// operator's steps with the built CLI: each is refused as the runbook says, the holders fence or never claim, and the
// audit over the same deployment file must stay clean (no false alarm).
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { DEFAULT_LOAN_TERM_MS, initRegistry, lendSpareCode } from '@idgen/lease/operator';
import { cleanupAll, lentEarlierClock, mintTogether, startEtcd, tempDir, type EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { idgen, type IdgenRun } from './support.test-helper.js';

jest.setTimeout(240_000);

/** The test-only route that turns the fixes off (see the file's comment); `mock` prefix: jest hoists the factories. */
const mockWithoutFix = { on: false };

/** A `confirmed` verdict with no term to renew (a record not `lent`, no `untilMs`): the loan taken on trust. */
const mockConfirmed = (mirror: { record: { code: number } }) => ({
  kind: 'confirmed',
  termMs: 600_000,
  entry: {
    key: 'without-the-fix',
    modRevision: '0',
    registry: { clusterId: '0', prefix: '' },
    record: { code: mirror.record.code, state: 'reclaimed', lentTo: 0, at: '', trail: [] },
  },
});
jest.mock('../../../packages/lease/src/loan-confirmation', () => {
  const real = jest.requireActual('../../../packages/lease/src/loan-confirmation');
  return {
    ...real,
    confirmLoan: (...args: unknown[]) =>
      mockWithoutFix.on
        ? Promise.resolve(mockConfirmed(args[2] as { record: { code: number } }))
        : real.confirmLoan(...args),
  };
});
jest.mock('../../../packages/lease/src/registry-guard', () => {
  const real = jest.requireActual('../../../packages/lease/src/registry-guard');
  const identity = jest.requireActual('../../../packages/lease/src/registry-identity');
  return {
    ...real,
    guardRegistryStep: async (io: { registry: unknown }, step: unknown) =>
      mockWithoutFix.on
        ? { now: await identity.readRegistryNow(io.registry), noteSeen: () => Promise.resolve() }
        : real.guardRegistryStep(io, step),
  };
});

const TTL_S = 3;
/** Eight TTLs: a holder's renewal may lag five TTLs on a busy machine before it gives its slot back. */
const LOAN_TERM_S = 8 * TTL_S;
const sources: EmbeddedIdSource[] = [];
const clients: Etcd3[] = [];

afterEach(() => {
  mockWithoutFix.on = false;
});

afterAll(async () => {
  await Promise.all(sources.map((s) => s.close().catch(() => undefined)));
  for (const c of clients) c.close();
  await cleanupAll();
});

async function ok(args: readonly string[]): Promise<IdgenRun> {
  const r = await idgen(args);
  if (r.code !== 0) throw new Error(`idgen ${args.join(' ')} exited ${String(r.code)}: ${r.stderr}`);
  return r;
}

function kv(e: EtcdServer): Etcd3 {
  const c = new Etcd3({ hosts: [e.clientUrl] });
  clients.push(c);
  return c;
}

/** A deployment: one etcd per region code given, bound with a 3 s TTL ceiling, a registry initialised over them. */
async function deployment(name: string, codes: readonly number[]) {
  const regions = await Promise.all(codes.map(() => startEtcd()));
  const registry = await startEtcd();
  const dir = await tempDir(`idgen-${name}`);
  const file = join(dir.path, 'deployment.json');
  writeFileSync(
    file,
    JSON.stringify({ regions: codes.map((c, i) => ({ name: `r${c}`, etcd: [(regions[i] as EtcdServer).clientUrl] })) }),
  );
  for (const [i, c] of codes.entries())
    await ok([
      'region',
      'init',
      '--sole-cluster',
      '--region',
      String(c),
      '--etcd',
      (regions[i] as EtcdServer).clientUrl,
      '--lease-ttl-ceiling',
      String(TTL_S),
    ]);
  await ok(['spare', 'init', '--registry', registry.clientUrl, '--config', file, '--loan-term', String(LOAN_TERM_S)]);
  // The layout record, as a region's first node writes it (a region whose borrower never claims has none otherwise).
  for (const r of regions) await kv(r).put('/idgen/layout').value(JSON.stringify(DEFAULT_LAYOUT.toRecord()));
  const etcdOf = (code: number): EtcdServer => regions[codes.indexOf(code)] as EtcdServer;
  // Each region's home slot 0 is held for the whole test by a long lease (in every snapshot too): a borrower with
  // home range 0-0 finds it full and claims under the spare code. Region 5 (the adopter) keeps its slots free.
  for (const c of codes.filter((x) => x !== 5)) {
    const lease = kv(etcdOf(c)).lease(600, { autoKeepAlive: false });
    await lease.put(`/idgen/regions/${c}/workers/0`).value('{"nodeId":"home","kind":"service"}');
  }
  const io = (code: number, registryAt = registry) => ({
    client: kv(etcdOf(code)),
    prefix: '/idgen',
    timeoutMs: 5000,
    layout: DEFAULT_LAYOUT,
    registry: { client: kv(registryAt), prefix: '/idgen', timeoutMs: 5000, name: registryAt.clientUrl },
    deployment: codes.map((c) => ({ client: kv(etcdOf(c)), prefix: '/idgen', timeoutMs: 5000, name: `region r${c}` })),
  });
  return { file, dir: dir.path, registry, etcdOf, io };
}

type Deployment = Awaited<ReturnType<typeof deployment>>;

/**
 * An embedded source on `etcd` for region `region`: its own code's `workers`, or, with a registry, a borrower whose
 * home range 0-0 is full (it claims under the spare code lent to its region).
 */
function source(
  etcd: EtcdServer,
  region: number,
  nodeId: string,
  registry?: EtcdServer,
  workers = '0-0',
): EmbeddedIdSource {
  const s = createEmbeddedIdSource({
    etcd: { endpoints: [etcd.clientUrl] },
    region,
    workers,
    nodeId,
    ttlSeconds: TTL_S,
    keepAliveIntervalMs: 500,
    keepAliveTimeoutMs: 400,
    fenceMarginMs: 1000,
    timeSource: 'none',
    slotWaitMs: 4000,
    ...(registry === undefined ? {} : { borrowSpare: true, registry: { endpoints: [registry.clientUrl] } }),
  });
  sources.push(s);
  return s;
}

/**
 * Holds every worker of spare code 5 in `etcd` but `worker` (a long lease each, as busy borrowers would): a second
 * borrower there lands on `worker`, the slot the first borrower holds in its own etcd. A borrower picks its slot at
 * random, and two borrowers of one code on different workers mint different IDs even under a double loan.
 */
async function onlyFree(etcd: EtcdServer, worker: number): Promise<void> {
  const lease = kv(etcd).lease(600, { autoKeepAlive: false });
  for (let w = 0; w <= DEFAULT_LAYOUT.maxWorker; w++)
    if (w !== worker) await lease.put(`/idgen/regions/5/workers/${w}`).value('{"nodeId":"busy","kind":"embedded"}');
}

/** Ready, or the error it gave up with. */
async function readyOrError(s: EmbeddedIdSource): Promise<Error | undefined> {
  return s.ready().then(
    () => undefined,
    (e: unknown) => e as Error,
  );
}

/**
 * Both sources mint at once until each has handed out 20,000 IDs or a refusal stops one (a fence: the fix) for good;
 * resolves with how many of their IDs are equal. Every wait has a deadline: 60 s.
 */
async function mintedEqual(a: EmbeddedIdSource, b: EmbeddedIdSource): Promise<number> {
  const m = await mintTogether(a, b, { atLeast: 20_000, withinMs: 60_000 });
  console.log(`minted together: ${m.first} and ${m.second} IDs, ${m.common} equal`);
  return m.common;
}

/**
 * Code 5 lent to region 2 (`idgen spare lend`'s function) a loan term and a quarter ago: its first-claim wait is over
 * (docs/design.md §7, "Loan terms"; the CLI's lend and its wait in real time: spare.spec.ts).
 */
async function lendEarlier(d: Deployment): Promise<void> {
  await lendSpareCode({ ...d.io(2), now: lentEarlierClock(LOAN_TERM_S * 1000) }, 5, 2);
}

/** Code 5 lent to region 2 through the registry, and region 2's borrower (`NAME-r2`) ready under it (on 5/0). */
async function lentToRegion2(d: Deployment, name: string) {
  const reg = ['--registry', d.registry.clientUrl, '--config', d.file];
  await lendEarlier(d);
  const first = source(d.etcdOf(2), 2, `${name}-r2`, d.registry);
  await first.ready();
  return { reg, first };
}

/**
 * Without the fix, once code 5 is lent to region 3 too (through `registry`): region 3's borrower (`NAME-r3`) lands on
 * the slot region 2's borrower holds, both mint equal IDs, and the audit names both, the slot and the ms, exit 1.
 */
async function expectDoubleHoldAudited(
  d: Deployment & { first: EmbeddedIdSource },
  registry: EtcdServer,
  name: string,
): Promise<void> {
  const worker = d.first.status().worker as number;
  await onlyFree(d.etcdOf(3), worker);
  const second = source(d.etcdOf(3), 3, `${name}-r3`, registry);
  expect(await readyOrError(second)).toBeUndefined();
  expect(await mintedEqual(d.first, second)).toBeGreaterThan(0);
  await Promise.all([d.first.close(), second.close()]);
  const r = await audit(d.file);
  expect(r.code).toBe(1);
  expect(r.violations).toContainEqual(expect.stringMatching(overlapLine(worker, `${name}-r2`, `${name}-r3`)));
}

async function audit(file: string): Promise<{ code: number | null; violations: string[]; stdout: string }> {
  const r = await idgen(['audit', '--config', file, '--timeout-ms', '10000']);
  return { code: r.code, violations: r.stdout.split('\n').filter((l) => l.startsWith('VIOLATION')), stdout: r.stdout };
}

/** The audit over `file` finds nothing: no violation, exit 0 (no false alarm after a refused step). */
async function expectCleanAudit(file: string): Promise<void> {
  const r = await audit(file);
  expect(r.violations).toEqual([]);
  expect(r.code).toBe(0);
}

/** The overlap line the audit must print: slot 5/`worker`, both holders by node ID, and the milliseconds. */
function overlapLine(worker: number, a: string, b: string): RegExp {
  return new RegExp(
    `^VIOLATION overlap: slot 5/${worker}: .*(${a} .* and .*${b}|${b} .* and .*${a}) .*may both have minted in ms \\d+…\\d+$`,
  );
}

describe('idgen audit after case 1: a borrower etcd restored after its loan moved on', () => {
  /**
   * Region 2 borrows spare code 5; region 2's etcd is snapshotted; 5 is reclaimed and adopted by region 5, whose
   * adopter mints on 5/0; region 2's etcd is restored from the snapshot (same token: its mirror says lent again).
   */
  async function deadLoan(name: string) {
    const d = await deployment(name, [2, 5]);
    const two = d.etcdOf(2);
    const reg = ['--registry', d.registry.clientUrl, '--config', d.file];
    await lendEarlier(d);
    const snapshot = join(d.dir, 'two.db');
    await two.snapshot(snapshot);
    const handover = join(d.dir, 'handover.json');
    await ok(['spare', 'reclaim', '5', '--handover', handover, '--etcd', two.clientUrl, '--wait-ms', '0', ...reg]);
    await ok(['spare', 'adopt', '5', '--handover', handover, '--etcd', d.etcdOf(5).clientUrl, ...reg]);
    await two.restore(snapshot);
    return { ...d, two };
  }

  /** Region 5's adopter on `worker` of its code, ready. */
  async function adopter(d: Awaited<ReturnType<typeof deadLoan>>, name: string, worker: number) {
    const a = source(d.etcdOf(5), 5, name, undefined, `${worker}-${worker}`);
    await a.ready();
    return a;
  }

  it('without the fix (the loan confirmation bypassed): the borrower and the adopter mint equal IDs; the audit names both, the slot and the milliseconds, exit 1', async () => {
    const d = await deadLoan('case1-unfixed');
    mockWithoutFix.on = true;
    const borrower = source(d.two, 2, 'case1-borrower', d.registry);
    expect(await readyOrError(borrower)).toBeUndefined();
    // The adopter on the borrower's worker of code 5 (as in loan-restore.spec.ts): the slot both mint under.
    const worker = borrower.status().worker as number;
    const a = await adopter(d, 'case1-adopter', worker);
    const common = await mintedEqual(borrower, a);
    expect(common).toBeGreaterThan(0);
    await Promise.all([borrower.close(), a.close()]);
    const r = await audit(d.file);
    expect(r.code).toBe(1);
    expect(r.violations).toContainEqual(expect.stringMatching(overlapLine(worker, 'case1-borrower', 'case1-adopter')));
  });

  it("with the fix: the borrower never claims under the dead loan; the audit names the restored mirror (no overlap) until the runbook's region restored seals it, then stays clean", async () => {
    const d = await deadLoan('case1-fixed');
    const borrower = source(d.two, 2, 'case1-fixed-borrower', d.registry);
    const refused = await readyOrError(borrower);
    expect(refused?.message).toMatch(/loan not confirmed by the registry|no free worker|not ready/i);
    const a = await adopter(d, 'case1-fixed-adopter', 0);
    expect(a.nextIdsSync(1000)).toHaveLength(1000);
    await Promise.all([borrower.close(), a.close()]);
    // The restored etcd's mirror still says lent: a true contradiction of records (no holder minted under it), which
    // the audit names as such, never as an overlap.
    const before = await audit(d.file);
    expect(before.violations).toEqual([
      'VIOLATION double-loan: spare code 5 is on loan in 2 etcds: r2 (lent to 2), r5 (adopted)',
    ]);
    // docs/runbook.md "etcd restored from a snapshot", step 2, with the registry: the dead loan is sealed.
    const restored = await idgen([
      'region',
      'restored',
      '--region',
      '2',
      '--etcd',
      d.two.clientUrl,
      '--lease-ttl',
      String(TTL_S),
      '--registry',
      d.registry.clientUrl,
    ]);
    expect(restored.code).toBe(0);
    expect(restored.stderr).toMatch(/spare code 5 lent here: sealed \(reclaimed\)/);
    await expectCleanAudit(d.file);
  });
});

describe('idgen audit after case 2: the registry restored from a backup, then the code lent again elsewhere', () => {
  /** Regions 2 and 3; a backup of the registry; code 5 lent to region 2, whose borrower mints on 5/0; the restore. */
  async function rewound(name: string) {
    const d = await deployment(name, [2, 3]);
    const backup = join(d.dir, 'registry.db');
    await d.registry.snapshot(backup);
    const { reg, first } = await lentToRegion2(d, name);
    await d.registry.restore(backup); // same token and URL: the registry knows no loan of code 5
    return { ...d, first, reg };
  }

  it('without the fix (the registry check bypassed): code 5 lent to region 3 too, both borrowers mint equal IDs; the audit names both, exit 1', async () => {
    const d = await rewound('case2-unfixed');
    mockWithoutFix.on = true;
    // Made a term and a quarter ago: the first-claim wait, which would also keep region 3 off the slot until region
    // 2's borrower gave it back, is bypassed too.
    await lendSpareCode({ ...d.io(3), now: lentEarlierClock(LOAN_TERM_S * 1000) }, 5, 3);
    await expectDoubleHoldAudited(d, d.registry, 'case2-unfixed');
  });

  it("with the fix: the lend to region 3 exits 4 (the registry's history went back), and the audit stays clean", async () => {
    const d = await rewound('case2-fixed');
    const lend = await idgen(['spare', 'lend', '5', '--to-region', '3', '--etcd', d.etcdOf(3).clientUrl, ...d.reg]);
    expect(lend).toMatchObject({ code: 4, stdout: '' });
    expect(lend.stderr).toMatch(/its history went back/);
    expect(d.first.nextIdsSync(1000)).toHaveLength(1000); // the live loan's borrower mints on
    await d.first.close();
    await expectCleanAudit(d.file);
  });
});

describe('idgen audit after case 5: two registries during a split', () => {
  /** Regions 2 and 3 follow the registry; code 5 lent to region 2, whose borrower mints on 5/0; a second registry. */
  async function split(name: string) {
    const d = await deployment(name, [2, 3]);
    const { first } = await lentToRegion2(d, name);
    const other = await startEtcd(); // region 3's operator cannot reach the registry and names another one
    return { ...d, first, other };
  }

  it('without the fix (the registry check bypassed): region 3 borrows code 5 from another registry, both mint equal IDs; the audit names both, exit 1', async () => {
    const d = await split('case5-unfixed');
    mockWithoutFix.on = true;
    const io = d.io(3, d.other);
    await initRegistry(io.registry);
    await lendSpareCode({ ...io, now: lentEarlierClock(DEFAULT_LOAN_TERM_MS) }, 5, 3); // its first-claim wait bypassed too
    await expectDoubleHoldAudited(d, d.other, 'case5-unfixed');
  });

  it('with the fix: the lend through the other registry exits 4, and the audit stays clean', async () => {
    const d = await split('case5-fixed');
    const args = ['--etcd', d.etcdOf(3).clientUrl, '--registry', d.other.clientUrl, '--config', d.file];
    // Never initialised, or initialised on its own: refused either way, nothing written.
    const bare = await idgen(['spare', 'lend', '5', '--to-region', '3', ...args]);
    expect(bare).toMatchObject({ code: 4, stdout: '' });
    await initRegistry({ client: kv(d.other), prefix: '/idgen', timeoutMs: 5000, name: d.other.clientUrl });
    const lend = await idgen(['spare', 'lend', '5', '--to-region', '3', ...args]);
    expect(lend).toMatchObject({ code: 4, stdout: '' });
    expect(d.first.nextIdsSync(1000)).toHaveLength(1000);
    await d.first.close();
    await expectCleanAudit(d.file);
  });
});
