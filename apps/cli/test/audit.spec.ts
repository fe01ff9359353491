// idgen audit and idgen whois, run as the built `idgen` against a 3-region deployment of real etcds (each bound to its
// code): holders that started and released, one that crashed, and an embedded source that minted an ID. Clean, the
// audit exits 0; each planted violation (a second etcd bound to a used code, a forged overlapping tenure, a double
// loan of spare code 5, a different layout record) is one line and exit 1; an unreachable etcd is exit 3 within
// --timeout-ms. whois names the tenure of the minted ID.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { DEFAULT_LAYOUT, createLayout, formatId } from '@idgen/core';
import { createEmbeddedIdSource, type EmbeddedIdSource } from '@idgen/embedded';
import { createEtcdLease, type LeaseTarget, type WorkerLease } from '@idgen/lease';
import { leaseKeys } from '@idgen/lease/records';
import { QUICK_LEASE_SETTINGS, bindRegion, cleanupAll, freePort, startEtcd, type EtcdServer } from '@idgen/testing';
import { idgen, idgenJson } from './support.test-helper.js';

jest.setTimeout(180_000);

/** A target that mints nothing: the lease's life cycle is what is on record. */
const target = (): LeaseTarget => ({
  assign: () => undefined,
  extend: () => undefined,
  unassign: () => undefined,
  lastMintedMs: () => -1,
});

const dir = mkdtempSync(join(tmpdir(), 'idgen-audit-'));
let etcds: EtcdServer[];
let kvs: Etcd3[];
let extra: EtcdServer;
let extraKv: Etcd3;
let source: EmbeddedIdSource;
let mintedId: bigint;
const leases: WorkerLease[] = [];

function config(name: string, regions: { name: string; url: string }[]): string {
  const file = join(dir, `${name}.json`);
  writeFileSync(
    file,
    JSON.stringify({ regions: regions.map((r) => ({ name: r.name, etcd: [r.url], prefix: '/idgen' })) }),
  );
  return file;
}
const base = (): { name: string; url: string }[] => etcds.map((e, i) => ({ name: `r${i + 1}`, url: e.clientUrl }));

beforeAll(async () => {
  etcds = await Promise.all([startEtcd(), startEtcd(), startEtcd()]);
  extra = await startEtcd();
  kvs = etcds.map((e) => new Etcd3({ hosts: [e.clientUrl] }));
  extraKv = new Etcd3({ hosts: [extra.clientUrl] });
  await Promise.all(etcds.map((e, i) => bindRegion(e, i + 1, '/idgen')));
  const holder = (i: number, workers: string, nodeId: string): WorkerLease => {
    const l = createEtcdLease(
      { endpoints: [etcds[i]?.clientUrl ?? ''], region: i + 1, workers, nodeId, ...QUICK_LEASE_SETTINGS },
      target(),
    );
    leases.push(l);
    return l;
  };
  // Region 1: two holders of slot 0 one after the other, each released.
  for (const n of ['r1-a', 'r1-b']) {
    const l = holder(0, '0-0', n);
    await l.start();
    await l.release();
  }
  // Region 2: an embedded source that mints (and stays open).
  source = createEmbeddedIdSource({
    etcd: { endpoints: [etcds[1]?.clientUrl ?? ''] },
    region: 2,
    nodeId: 'orders-embedded-1',
    timeSource: 'none',
    ...QUICK_LEASE_SETTINGS,
  });
  await source.ready();
  mintedId = source.nextIdSync();
  // Region 3: a holder that crashes (its lease revoked, nothing more written), then its slot's next holder, released.
  const crashed = holder(2, '3-3', 'r3-crashed');
  await crashed.start();
  await kvs[2]?.leaseClient.leaseRevoke({ ID: crashed.snapshot().leaseId ?? '' });
  await crashed.release();
  const next = holder(2, '3-3', 'r3-next');
  await next.start();
  await next.release();
  // Region 3 also keeps a crashed holder with no successor: its tenure stays open, its last-ms its own.
  const lone = holder(2, '4-4', 'r3-lone');
  await lone.start();
  await kvs[2]?.leaseClient.leaseRevoke({ ID: lone.snapshot().leaseId ?? '' });
  await lone.release();
});

afterAll(async () => {
  await source?.close();
  await Promise.all(leases.map((l) => l.release()));
  for (const kv of [...(kvs ?? []), extraKv]) kv?.close();
  await cleanupAll();
});

interface AuditJson {
  clean: boolean;
  findings: { kind: string; message: string }[];
  unreachable: string[];
}

describe('idgen audit', () => {
  it('a clean deployment: exit 0, every tenure on record', async () => {
    const file = config('clean', base());
    const r = await idgen(['audit', '--config', file]);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^audit: 3 of 3 region\(s\) read, \d+ slot\(s\), \d+ tenure\(s\) on record: clean\n$/);
    const j = await idgenJson<AuditJson>(['audit', '--config', file]);
    expect(j).toMatchObject({ code: 0, json: { clean: true, findings: [], unreachable: [] } });
    const crashed = JSON.parse((await kvs[2]?.get(leaseKeys.tenures('/idgen', 3, 3)).string()) ?? '{}') as {
      tenures: { nodeId: string; end: string }[];
    };
    expect(crashed.tenures.map((t) => [t.nodeId, t.end])).toEqual([
      ['r3-crashed', 'expired'],
      ['r3-next', 'released'],
    ]);
  });

  const violation = async (file: string, kind: string, pattern: RegExp): Promise<void> => {
    const r = await idgen(['audit', '--config', file]);
    expect(r.code).toBe(1);
    const lines = r.stdout.split('\n').filter((l) => l.startsWith('VIOLATION'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^VIOLATION ${kind}: `));
    expect(lines[0]).toMatch(pattern);
  };

  it('a second etcd bound to a code already in use: one line, exit 1', async () => {
    await extraKv.delete().all();
    await extraKv.put('/idgen/layout').value(JSON.stringify(DEFAULT_LAYOUT.toRecord()));
    await bindRegion(extra, 2, '/idgen');
    await violation(
      config('twice', [...base(), { name: 'r2-again', url: extra.clientUrl }]),
      'binding',
      /region code 2 is bound in 2 etcds: r2, r2-again/,
    );
  });

  it('a forged tenure overlapping the one before: one line, exit 1', async () => {
    const key = leaseKeys.tenures('/idgen', 1, 9);
    const t = (leaseId: string, firstMs: number, lastMs: number) => ({
      code: 1,
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
    await kvs[0]?.put(key).value(
      JSON.stringify({
        tenures: [t('1', now - 5000, now), t('2', now - 10, now + 10)],
        compacted: { count: 0, maxLastMs: -1 },
      }),
    );
    try {
      await violation(
        config('overlap', base()),
        'overlap',
        /slot 1\/9: tenure forged-2 .* at or below \d+, the end of forged-1/,
      );
    } finally {
      await kvs[0]?.delete().key(key);
    }
  });

  it("spare code 5 recorded lent in two regions' etcds (a double loan): one line, exit 1", async () => {
    const key = '/idgen/spare-codes/5';
    const at = new Date().toISOString();
    await kvs[0]?.put(key).value(JSON.stringify({ code: 5, state: 'lent', lentTo: 1, at }));
    await kvs[1]?.put(key).value(JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at }));
    try {
      await violation(
        config('loan', base()),
        'double-loan',
        /spare code 5 is on loan in 2 etcds: r1 \(lent to 1\), r2 \(lent to 2\)/,
      );
    } finally {
      await kvs[0]?.delete().key(key);
      await kvs[1]?.delete().key(key);
    }
  });

  it("slot records of another region's code in a bound etcd (a holder on the wrong --region): one line, exit 1", async () => {
    const key = leaseKeys.lastMs('/idgen', 3, 7);
    const record = {
      ms: Date.now(),
      released: true,
      nodeId: 'wrong-region',
      at: new Date().toISOString(),
      ttlMs: 6000,
    };
    await kvs[1]?.put(key).value(JSON.stringify(record));
    try {
      await violation(
        config('foreign', base()),
        'binding',
        /r2 \(etcd .*\): bound to code 2, but holds slot records of code 3 \(workers 7\), which it neither serves nor borrows/,
      );
    } finally {
      await kvs[1]?.delete().key(key);
    }
  });

  it('spare-code mirrors that follow two registries (each lends a code once): one line, exit 1', async () => {
    const at = new Date().toISOString();
    const mirror = (code: number, lentTo: number, clusterId: string) =>
      JSON.stringify({
        code,
        state: 'lent',
        lentTo,
        at,
        registryRevision: '7',
        registry: { clusterId, prefix: '/reg' },
      });
    await kvs[0]?.put('/idgen/spare-codes/5').value(mirror(5, 1, '111'));
    await kvs[1]?.put('/idgen/spare-codes/6').value(mirror(6, 2, '222'));
    try {
      await violation(
        config('registries', base()),
        'double-loan',
        /the spare-code mirrors follow 2 registries, a deployment has one: cluster 111 prefix \/reg: r1 \(code 5\); cluster 222 prefix \/reg: r2 \(code 6\)/,
      );
    } finally {
      await kvs[0]?.delete().key('/idgen/spare-codes/5');
      await kvs[1]?.delete().key('/idgen/spare-codes/6');
    }
  });

  it('a different layout record: one line, exit 1', async () => {
    await extraKv.delete().all();
    const other = createLayout({ ...DEFAULT_LAYOUT.toRecord(), epochMs: DEFAULT_LAYOUT.epochMs + 1000 });
    await extraKv.put('/idgen/layout').value(JSON.stringify(other.toRecord()));
    await bindRegion(extra, 4, '/idgen');
    await violation(
      config('layout', [...base(), { name: 'r4', url: extra.clientUrl }]),
      'layout',
      /r4's layout record .* differs from r1's/,
    );
  });

  it('an unreachable etcd: exit 3 within --timeout-ms', async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const started = Date.now();
    const r = await idgen([
      'audit',
      '--config',
      config('dead', [...base(), { name: 'r5', url: dead }]),
      '--timeout-ms',
      '1500',
    ]);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^idgen audit: unreachable: r5 \(etcd http:\/\/127\.0\.0\.1:\d+\)/);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('a bad config: exit 2', async () => {
    const file = join(dir, 'bad.json');
    writeFileSync(file, JSON.stringify({ regions: [{ name: 'r1' }] }));
    const r = await idgen(['audit', '--config', file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/regions\[0\]\.etcd is not a list of etcd URLs/);
    expect((await idgen(['audit'])).code).toBe(2);
  });
});

describe('idgen whois', () => {
  it('names the tenure that minted an ID', async () => {
    const file = config('whois', base());
    const id = formatId(mintedId);
    const r = await idgen(['whois', id, '--config', file]);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(
      new RegExp(
        // Open, or fenced if the source lost its 2 s lease on a busy machine since: the tenure is named either way.
        `^${id}: region 2, worker \\d+, ms \\d+ \\(\\S+\\): minted by orders-embedded-1 \\(embedded, lease \\d+\\) in r2's etcd, tenure \\d+…\\S+, up to \\d+, (open|fenced)\\n$`,
      ),
    );
    const j = await idgenJson<{ region: number; tenures: { nodeId: string; kind: string; end: string }[] }>([
      'whois',
      id,
      '--etcd',
      etcds[1]?.clientUrl ?? '',
    ]);
    expect(j).toMatchObject({
      code: 0,
      json: {
        region: 2,
        tenures: [{ nodeId: 'orders-embedded-1', kind: 'embedded', end: expect.stringMatching(/^(open|fenced)$/) }],
      },
    });
  });

  it('says none is on record for an ID no tenure covers (exit 1)', async () => {
    const layout = DEFAULT_LAYOUT;
    // Slot 1/50 was never held: no tenure of it is on record (slot 1/0's first tenure starts at the epoch).
    const id = layout.compose({ timestampMs: 1000, region: 1, worker: 50, sequence: 0 });
    const r = await idgen(['whois', formatId(id), '--config', config('none', base())]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/: no tenure on record covers it\n$/);
  });
});
