// idgen audit over a real deployment: five regions from @idgen/testing's startDeployment, each its
// own etcd with TLS, users and roles, bound with idgen region init, a TLS node serving in each and an embedded caller
// minting in region 2; spare code 5 lent to region 2 through the registry (region 0's etcd), reclaimed, and adopted by
// a sixth etcd bound to 5. The audit reads all six as the operator and reports clean; then each planted violation (a
// second etcd bound to a used code, a forged overlapping tenure, a double loan) is one line and exit 1.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { leaseKeys } from '@idgen/lease/records';
import {
  QUICK_LEASE_SETTINGS,
  bindRegion,
  cleanupAll,
  startDeployment,
  startEtcd,
  type Deployment,
  type EtcdServer,
} from '@idgen/testing';

jest.setTimeout(300_000);

const dir = mkdtempSync(join(tmpdir(), 'idgen-audit-deployment-'));
let dep: Deployment;
let adopter: EtcdServer;
let extra: EtcdServer;
let source: EmbeddedIdSource;

interface AuditEntry {
  name: string;
  etcd: string[];
  prefix: string;
  ca?: string;
  cert?: string;
  key?: string;
  user?: string;
  passwordFile?: string;
}

/** The audit config of the deployment as the operator reads it (idgen-operator, read-only), plus `more`. */
function config(name: string, more: AuditEntry[] = []): string {
  const regions: AuditEntry[] = dep.regions.map((r) => ({
    name: `r${r.code}`,
    etcd: [...r.etcd.endpoints],
    prefix: dep.prefix,
    ca: r.etcd.caFile,
    cert: r.etcd.certFile,
    key: r.etcd.keyFile,
    user: r.users['idgen-operator'].name,
    passwordFile: r.users['idgen-operator'].passwordFile,
  }));
  regions.push({ name: 'r5', etcd: [adopter.clientUrl], prefix: dep.prefix }, ...more);
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify({ regions }));
  return file;
}

/**
 * The deployment file of the spare-code steps (docs/runbook.md "Lending a spare region code"): every region's etcd as
 * the spare-code admin, who may write `{prefix}/spare-registry/seen` (each region's memory of the registry).
 */
function spareConfig(): string {
  const regions: AuditEntry[] = dep.regions.map((r) => ({
    name: `r${r.code}`,
    etcd: [...r.etcd.endpoints],
    prefix: dep.prefix,
    ca: r.etcd.caFile,
    cert: r.etcd.certFile,
    key: r.etcd.keyFile,
    user: r.users['idgen-spare-admin'].name,
    passwordFile: r.users['idgen-spare-admin'].passwordFile,
  }));
  regions.push({ name: 'r5', etcd: [adopter.clientUrl], prefix: dep.prefix });
  const file = join(dir, 'spare-deployment.json');
  writeFileSync(file, JSON.stringify({ regions }));
  return file;
}

/** The registry flags: region 0's etcd, as the spare-code admin. */
function registryArgs(): string[] {
  const r0 = dep.region(0);
  return [
    '--registry',
    r0.etcd.endpoints.join(','),
    '--registry-ca',
    r0.etcd.caFile,
    '--registry-cert',
    r0.etcd.certFile,
    '--registry-key',
    r0.etcd.keyFile,
    '--registry-user',
    r0.users['idgen-spare-admin'].name,
    '--registry-password-file',
    r0.users['idgen-spare-admin'].passwordFile,
  ];
}

async function ok(args: string[]): Promise<string> {
  const r = await dep.cli(args, 60_000);
  if (r.code !== 0) throw new Error(`idgen ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

beforeAll(async () => {
  dep = await startDeployment({ regions: 5, nodesPerRegion: 1 });
  adopter = await startEtcd();
  extra = await startEtcd();
  await bindRegion(adopter, 5, dep.prefix);
  const adopterKv = new Etcd3({ hosts: [adopter.clientUrl] });
  try {
    // The layout record, as the deployment's first node wrote it in every other region.
    await adopterKv.put(`${dep.prefix}/layout`).value(JSON.stringify(DEFAULT_LAYOUT.toRecord()));
  } finally {
    adopterKv.close();
  }
  const r2 = dep.region(2);
  source = createEmbeddedIdSource({
    etcd: {
      endpoints: [...r2.etcd.endpoints],
      prefix: dep.prefix,
      tls: {
        ca: readFileSync(r2.etcd.caFile),
        cert: readFileSync(r2.etcd.certFile),
        key: readFileSync(r2.etcd.keyFile),
      },
      auth: {
        username: r2.users['idgen-node'].name,
        password: readFileSync(r2.users['idgen-node'].passwordFile, 'utf8').trim(),
      },
    },
    region: 2,
    nodeId: 'orders-embedded-r2',
    timeSource: 'none',
    ...QUICK_LEASE_SETTINGS,
  });
  await source.ready();
  source.nextIdSync();
  // Spare code 5: lent to region 2 through the registry, reclaimed (no borrower holds it), adopted by the sixth etcd.
  const spare = (code: number) => dep.cliArgs(code, 'idgen-spare-admin');
  const file = ['--config', spareConfig()];
  await ok(['spare', 'init', ...registryArgs(), ...file, '--loan-term', '8']); // four of a 2 s TTL (§7)
  await ok(['spare', 'lend', '5', '--to-region', '2', ...spare(2), ...registryArgs(), ...file]);
  const handover = join(dir, 'code-5.json');
  await ok([
    'spare',
    'reclaim',
    '5',
    '--handover',
    handover,
    '--wait-ms',
    '30000',
    ...spare(2),
    ...registryArgs(),
    ...file,
  ]);
  await ok(['spare', 'adopt', '5', '--handover', handover, '--etcd', adopter.clientUrl, ...registryArgs(), ...file]);
});

afterAll(async () => {
  await source?.close();
  await dep?.stop();
  await cleanupAll();
});

const audit = (file: string) => dep.cli(['audit', '--config', file, '--timeout-ms', '10000'], 60_000);

async function violation(file: string, kind: string, pattern: RegExp): Promise<void> {
  const r = await audit(file);
  expect(r.code).toBe(1);
  const lines = r.stdout.split('\n').filter((l) => l.startsWith('VIOLATION'));
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^VIOLATION ${kind}: `));
  expect(lines[0]).toMatch(pattern);
}

describe('idgen audit over a five-region TLS deployment', () => {
  it('reports clean: six etcds bound to distinct codes, code 5 held by one region, every tenure in order', async () => {
    const r = await audit(config('clean'));
    expect(r.code).toBe(0);
    // Nothing on stderr: no DEP0123 either (an etcd given by IP gets no TLS server name: @idgen/lease's etcd-tls.ts).
    expect(r.stderr.split('\n').filter((l) => l !== '')).toEqual([]);
    expect(r.stdout).toMatch(/^audit: 6 of 6 region\(s\) read, \d+ slot\(s\), \d+ tenure\(s\) on record: clean\n$/);
  });

  it('a second etcd bound to a code in use: one line, exit 1', async () => {
    const kv = new Etcd3({ hosts: [extra.clientUrl] });
    try {
      await kv.delete().all();
      await kv.put(`${dep.prefix}/layout`).value(JSON.stringify(DEFAULT_LAYOUT.toRecord()));
      await bindRegion(extra, 3, dep.prefix);
      await violation(
        config('twice', [{ name: 'r3-again', etcd: [extra.clientUrl], prefix: dep.prefix }]),
        'binding',
        /region code 3 is bound in 2 etcds: r3, r3-again/,
      );
    } finally {
      await kv.delete().all();
      kv.close();
    }
  });

  it('a forged tenure overlapping the one before it: one line, exit 1', async () => {
    const kv = new Etcd3({ hosts: [adopter.clientUrl] });
    const key = leaseKeys.tenures(dep.prefix, 5, 9);
    const t = (leaseId: string, firstMs: number, lastMs: number) => ({
      code: 5,
      worker: 9,
      kind: 'service',
      nodeId: `forged-${leaseId}`,
      leaseId,
      firstMs,
      lastMs,
      end: 'released',
      startedAt: new Date().toISOString(),
    });
    const now = Date.now();
    try {
      await kv.put(key).value(
        JSON.stringify({
          tenures: [t('1', now - 5000, now), t('2', now - 10, now + 10)],
          compacted: { count: 0, maxLastMs: -1 },
        }),
      );
      await violation(
        config('overlap'),
        'overlap',
        /slot 5\/9: tenure forged-2 .* at or below \d+, the end of forged-1/,
      );
    } finally {
      await kv.delete().key(key);
      kv.close();
    }
  });

  it("spare code 6 recorded lent in two regions' etcds (a double loan made behind the registry): one line, exit 1", async () => {
    const at = new Date().toISOString();
    const key = `${dep.prefix}/spare-codes/6`;
    const r2 = dep.region(2);
    // Region 2's etcd as its root (TLS, auth), the adopter's in plaintext.
    const r2Kv = new Etcd3({
      hosts: [...r2.etcd.endpoints],
      credentials: {
        rootCertificate: readFileSync(r2.etcd.caFile),
        certChain: readFileSync(r2.etcd.certFile),
        privateKey: readFileSync(r2.etcd.keyFile),
      },
      auth: { username: 'root', password: readFileSync(r2.users.root.passwordFile, 'utf8').trim() },
    });
    const adopterKv = new Etcd3({ hosts: [adopter.clientUrl] });
    try {
      await r2Kv.put(key).value(JSON.stringify({ code: 6, state: 'lent', lentTo: 2, at }));
      await adopterKv.put(key).value(JSON.stringify({ code: 6, state: 'lent', lentTo: 5, at }));
      await violation(
        config('loan'),
        'double-loan',
        /spare code 6 is on loan in 2 etcds: r2 \(lent to 2\), r5 \(lent to 5\)/,
      );
    } finally {
      await r2Kv.delete().key(key);
      await adopterKv.delete().key(key);
      r2Kv.close();
      adopterKv.close();
    }
  });
});
