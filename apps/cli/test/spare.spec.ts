// idgen spare lend | reclaim | adopt | list, decode --etcd and leases on a borrowed code, each run as the built `idgen`
// against real etcd servers: region 2's (which lends code 5) and a new region's (which adopts it). The borrower is a
// real lease of @idgen/lease (embedded, borrowSpare) driving a stand-in minter. Each etcd is bound to its region's code
// with idgen region init first: region 2's to 2, the new region's to 5 (the code it adopts). lend, reclaim and adopt
// are decided in the deployment's spare-code registry first (--registry, a third etcd; docs/design.md §7); region 3's
// etcd is where a second loan of the same code is tried.
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createEtcdLease, type LeaseTarget, type WorkerAssignment, type WorkerLease } from '@idgen/lease';
import { QUICK_LEASE_SETTINGS, cleanupAll, enableEtcdAuth, startEtcd, tempDirSync } from '@idgen/testing';
import { idgen, idgenJson } from './support.test-helper.js';

jest.setTimeout(120_000);

let regionTwo: string;
let newRegion: string;
let registry: string;
let regionThree: string;
let dir: string;
let deployment: string;
const leases: WorkerLease[] = [];

beforeAll(async () => {
  [regionTwo, newRegion, registry, regionThree] = (
    await Promise.all([startEtcd(), startEtcd(), startEtcd(), startEtcd()])
  ).map((e) => e.clientUrl) as [string, string, string, string];
  dir = tempDirSync('cli-spare').path;
  // The deployment file (idgen audit's): every region's etcd, which lend, reclaim and adopt check before they write.
  deployment = join(dir, 'deployment.json');
  writeFileSync(
    deployment,
    JSON.stringify({
      regions: [
        { name: 'r2', etcd: [regionTwo] },
        { name: 'r5', etcd: [newRegion] },
        { name: 'r3', etcd: [regionThree] },
      ],
    }),
  );
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  await cleanupAll();
});

/** A minter stand-in: records its assignment. */
function target(): LeaseTarget & { assignment?: WorkerAssignment } {
  const t: LeaseTarget & { assignment?: WorkerAssignment } = {
    assign: (a) => void (t.assignment = a),
    extend: () => undefined,
    unassign: () => void (t.assignment = undefined),
    lastMintedMs: () => -1,
  };
  return t;
}

function startLease(
  endpoint: string,
  extra: { workers: string; kind?: 'embedded'; borrowSpare?: boolean; registry?: { endpoints: string[] } },
  t: LeaseTarget,
): Promise<void> {
  const l = createEtcdLease(
    {
      endpoints: [endpoint],
      region: 2,
      ...QUICK_LEASE_SETTINGS,
      ...extra,
    },
    t,
  );
  leases.push(l);
  return l.start();
}

interface SlotsJson {
  slots: {
    region: number;
    worker: number;
    holder: { kind: string } | null;
    lastMs: { released: boolean } | null;
    flags: string[];
  }[];
}

describe('idgen spare, across two etcd clusters', () => {
  it('lend, borrow (leases and decode show it), reclaim to a handover file, adopt in the new region', async () => {
    const two = ['--etcd', regionTwo, '--registry', registry, '--config', deployment];
    const fresh = ['--etcd', newRegion, '--registry', registry, '--config', deployment];
    // Before the first lend: an uninitialised registry is refused (exit 4); idgen spare init gives it its deployment
    // ID and records it in every region's etcd.
    expect(await idgen(['region', 'init', '--sole-cluster', '--region', '3', '--etcd', regionThree])).toMatchObject({
      code: 0,
    });
    const uninitialised = await idgen([
      'spare',
      'lend',
      '6',
      '--to-region',
      '3',
      '--etcd',
      regionThree,
      '--registry',
      registry,
      '--config',
      deployment,
    ]);
    expect(uninitialised.code).toBe(4);
    expect(uninitialised.stderr).toMatch(
      /^idgen spare lend: the spare-code registry .* has no deployment ID .*idgen spare init/m,
    );
    // The loan term: four of the TTL ceiling (6 s), longer than the start of region 2's home node and the borrower
    // after the lend on a busy machine (no borrower renews it before then; docs/design.md §7, "Loan terms").
    const init = await idgen(['spare', 'init', '--registry', registry, '--config', deployment, '--loan-term', '24']);
    expect(init).toMatchObject({ code: 0 });
    expect(init.stdout).toMatch(
      /^spare-code registry: deployment [0-9a-f-]+ \(etcd cluster \d+, prefix \/idgen, loan term 24 s\); recorded in 3 region\(s\) at revision \d+$/m,
    );
    expect((await idgen(['spare', 'init', '--registry', registry, '--config', deployment])).stdout).toMatch(
      /already initialised/,
    );
    // Usage and refusals first.
    expect((await idgen(['spare', 'lend', '5', ...two])).code).toBe(2); // no --to-region
    // No registry: a usage error naming it, before any etcd call.
    const noRegistry = await idgen(['spare', 'lend', '5', '--to-region', '2', '--etcd', regionTwo]);
    expect(noRegistry.code).toBe(2);
    expect(noRegistry.stderr).toMatch(/^idgen spare lend: --registry is required: idgen spare lend is decided in/m);
    const noConfig = await idgen([
      'spare',
      'lend',
      '5',
      '--to-region',
      '2',
      '--etcd',
      regionTwo,
      '--registry',
      registry,
    ]);
    expect(noConfig.code).toBe(2);
    expect(noConfig.stderr).toMatch(/^idgen spare lend: --config <deployment.json> is required/m);
    for (const v of ['reclaim', 'adopt'])
      expect(
        (await idgen(['spare', v, '5', '--handover', join(dir, 'code-5.json'), '--etcd', regionTwo])).stderr,
      ).toMatch(new RegExp(`^idgen spare ${v}: --registry is required`, 'm'));
    // Not bound yet: the loan has no region's etcd to go to.
    const unbound = await idgen(['spare', 'lend', '5', '--to-region', '2', ...two]);
    expect(unbound.code).toBe(1);
    expect(unbound.stderr).toMatch(/^idgen spare lend: this etcd was never bound to a region code/m);
    expect(await idgen(['region', 'init', '--sole-cluster', '--region', '2', '--etcd', regionTwo])).toMatchObject({
      code: 0,
    });
    const notSpare = await idgen(['spare', 'lend', '2', '--to-region', '2', ...two]);
    expect(notSpare.code).toBe(1);
    expect(notSpare.stderr).toMatch(/^idgen spare lend: region code 2 is not a spare code \(spare codes: 5, 6, 7/m);
    const nobody = await idgen(['spare', 'list', '--etcd', 'http://127.0.0.1:9', '--timeout-ms', '1500']);
    expect(nobody.code).toBe(3);

    // Region 2's one home slot is taken.
    await startLease(regionTwo, { workers: '0-0' }, target());
    const lent = await idgen(['spare', 'lend', '5', '--to-region', '2', ...two]);
    // A new loan: its borrowers first claim a term (24 s here) and a quarter after the lend (docs/design.md §7).
    const lentAt = Date.now();
    expect(lent.code).toBe(0);
    const firstClaims =
      /^spare code 5: lent, lent to region 2\nborrowers may first claim under it from (\S+Z) \(a loan term and a quarter after the lend: docs\/runbook.md, "Lending a spare region code"\)\n$/.exec(
        lent.stdout,
      );
    const usableFromMs = Date.parse(firstClaims?.[1] ?? '');
    expect(usableFromMs - lentAt).toBeGreaterThan(24_000);
    const again = await idgenJson<{ changed: boolean; record: Record<string, unknown>; usableFrom: string }>([
      'spare',
      'lend',
      '5',
      '--to-region',
      '2',
      ...two,
    ]);
    expect(again.json).toMatchObject({ changed: false, record: { code: 5, state: 'lent', lentTo: 2 } });
    expect(Date.parse(again.json.usableFrom)).toBe(usableFromMs);

    // An embedded borrower confirms the loan in the registry before its claim (docs/design.md §7): refused until
    // then (the 30 s since the lend hold one lease start), then it claims under code 5.
    const borrow = {
      workers: '0-0',
      kind: 'embedded' as const,
      borrowSpare: true,
      registry: { endpoints: [registry] },
    };
    const beforeFirstClaims = await startLease(regionTwo, borrow, target()).catch((e: unknown) => e);
    expect(String(beforeFirstClaims)).toMatch(
      /spare code 5: loan not confirmed by the registry \(a new loan: first claims from/,
    );
    await new Promise((r) => setTimeout(r, Math.max(0, usableFromMs - Date.now()) + 50));
    const borrower = target();
    await startLease(regionTwo, borrow, borrower);
    expect(borrower.assignment?.region).toBe(5);
    const worker = borrower.assignment?.worker ?? -1;

    const leasesRun = await idgenJson<SlotsJson>(['leases', '--etcd', regionTwo, '--region', '5']);
    expect(leasesRun.code).toBe(0);
    expect(leasesRun.json.slots).toMatchObject([
      { region: 5, worker, holder: { kind: 'embedded' }, flags: ['borrowed: code 5, lent to region 2'] },
    ]);
    const table = await idgen(['leases', '--etcd', regionTwo, '--region', '5']);
    expect(table.stdout).toMatch(
      new RegExp(`^5\\s+${worker}\\s+\\S+\\s+embedded\\s.*borrowed: code 5, lent to region 2$`, 'm'),
    );

    const id = DEFAULT_LAYOUT.compose({ timestampMs: 1000, region: 5, worker, sequence: 7 }).toString();
    const decoded = await idgen(['decode', id, '--etcd', regionTwo]);
    expect(decoded.code).toBe(0);
    expect(JSON.parse(decoded.stdout)).toMatchObject({
      region: 5,
      worker,
      sequence: 7,
      spare: 'code 5, lent to region 2',
    });
    // Without --etcd, decode stays offline and says nothing of loans.
    expect(JSON.parse((await idgen(['decode', id])).stdout)).not.toHaveProperty('spare');

    const list = await idgenJson<{ codes: { code: number; record: { state: string } | null; held: number[] }[] }>([
      'spare',
      'list',
      '--etcd',
      regionTwo,
    ]);
    expect(list.json.codes).toEqual([
      { code: 5, spare: true, record: expect.objectContaining({ state: 'lent', lentTo: 2 }), held: [worker] },
      { code: 6, spare: true, record: null, held: [] },
      { code: 7, spare: true, record: null, held: [] },
    ]);
    // With --registry, the registry's record beside each: the mirror names the registry revision it follows, and the
    // registry's record is there or later (the borrower's renewals of the loan's term, docs/design.md §7).
    const both = await idgenJson<{
      codes: {
        code: number;
        record: { registryRevision?: string } | null;
        registry: { modRevision?: string; untilMs?: number } | null;
      }[];
    }>(['spare', 'list', ...two]);
    expect(both.json.codes[0]).toMatchObject({
      code: 5,
      registry: { state: 'lent', lentTo: 2, modRevision: expect.stringMatching(/^\d+$/), untilMs: expect.any(Number) },
    });
    const listed = both.json.codes[0];
    expect(BigInt(listed?.registry?.modRevision ?? '0')).toBeGreaterThanOrEqual(
      BigInt(listed?.record?.registryRevision ?? 'x'),
    );
    expect(both.json.codes[1]).toMatchObject({ code: 6, registry: null });
    expect((await idgen(['spare', 'list', ...two])).stdout).toMatch(/^5\s+lent\s+2\s+1\s+\S+\s+lent to region 2$/m);

    // Reclaim: with no time to wait the slot is still held (exit 1, run again); then the handover.
    const file = join(dir, 'code-5.json');
    const early = await idgen(['spare', 'reclaim', '5', '--handover', file, '--wait-ms', '0', ...two]);
    if (early.code === 1)
      expect(early.stderr).toMatch(
        /1 slot\(s\) still held after 0 ms \(workers \d+\); no handover yet: run reclaim again/,
      );
    else expect(early.code).toBe(0); // the borrower gave its slot back before the first look
    // The wait is a deadline, not a pause: reclaim ends as soon as the borrower's slot is free (its lease has a 2 s TTL).
    // Its one line is in the failure message if the slot is still held then (a busy-machine run once saw exit 1 at 20 s).
    const reclaimed = await idgen(['spare', 'reclaim', '5', '--handover', file, '--wait-ms', '60000', ...two]);
    expect({ code: reclaimed.code, stderr: reclaimed.stderr }).toMatchObject({ code: 0 });
    const handover = JSON.parse(readFileSync(file, 'utf8')) as {
      code: number;
      workers: { worker: number; lastMs: number; source: { released: boolean; ms: number } }[];
    };
    expect(reclaimed.stdout).toMatch(
      new RegExp(
        `^spare code 5: reclaimed from region 2; handover written to .*code-5.json \\(${handover.workers.length} worker\\(s\\)\\)$`,
        'm',
      ),
    );
    expect(handover).toMatchObject({ code: 5, lentTo: 2 });
    // Every worker ever claimed under code 5 is handed over: the borrower's, and another one if its lease was lost
    // on this busy machine (TTL 2 s) and it claimed again while the code was still lent.
    const handedOver = handover.workers.map((w) => w.worker);
    expect(handedOver).toContain(worker);
    for (const w of handover.workers) {
      // A clean release hands over its own millisecond; a lease that expired, its last-ms + TTL + clock bound.
      if (w.source.released) expect(w.lastMs).toBe(w.source.ms);
      else expect(w.lastMs).toBeGreaterThan(w.source.ms);
    }
    // Nothing may claim under it in region 2 any more, and it is not lent again.
    expect((await idgen(['spare', 'lend', '5', '--to-region', '2', ...two])).stderr).toMatch(
      /already recorded here as reclaimed/,
    );

    // Adopt: refused in the etcd that lent it (bound to region 2, not 5), with another code, or a bad file; done in
    // the new region's, bound to 5 first.
    const onLender = await idgen(['spare', 'adopt', '5', '--handover', file, ...two]);
    expect(onLender.code).toBe(1);
    expect(onLender.stderr).toMatch(/^idgen spare adopt: this etcd serves region 2 \(\/idgen\/region\), not region 5/m);
    expect(await idgen(['region', 'init', '--sole-cluster', '--region', '5', '--etcd', newRegion])).toMatchObject({
      code: 0,
    });
    expect((await idgen(['spare', 'adopt', '6', '--handover', file, ...fresh])).code).toBe(2);
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, '{"format":"something else"}');
    const badRun = await idgen(['spare', 'adopt', '5', '--handover', bad, ...fresh]);
    expect(badRun.code).toBe(2);
    expect(badRun.stderr).toMatch(/bad.json: format is not "idgen-spare-handover\/1"/);
    const adopted = await idgenJson<{ changed: boolean; written: number; record: { state: string } }>([
      'spare',
      'adopt',
      '5',
      '--handover',
      file,
      ...fresh,
    ]);
    expect(adopted).toMatchObject({
      code: 0,
      json: { changed: true, written: handover.workers.length, record: { state: 'adopted' } },
    });
    expect((await idgen(['spare', 'adopt', '5', '--handover', file, ...fresh])).stdout).toMatch(
      /already adopted here; 0 last-ms record\(s\) written/,
    );
    const slots = await idgenJson<SlotsJson>(['leases', '--etcd', newRegion, '--region', '5']);
    expect(slots.json.slots.map((slot) => slot.worker).sort((a, b) => a - b)).toEqual(
      [...handedOver].sort((a, b) => a - b),
    );
    for (const slot of slots.json.slots)
      expect(slot).toMatchObject({ region: 5, holder: null, lastMs: { released: true }, flags: [] });
    expect(JSON.parse((await idgen(['decode', id, '--etcd', newRegion])).stdout)).toMatchObject({
      spare: 'code 5, adopted here (lent to region 2 before)',
    });

    // Every verb explains itself.
    for (const v of ['lend', 'reclaim', 'adopt', 'list']) {
      const help = await idgen(['spare', v, '--help']);
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(/--etcd-password-file/);
      expect(help.stdout).toMatch(/--registry <urls>[\s\S]*--registry-prefix[\s\S]*--registry-password-file/);
    }
  }, 180_000); // a 30 s first-claim wait, then reclaim's deadline of 60 s

  it("the registry decides: a second loan through region 3's etcd is refused, and so is a lend after adoption", async () => {
    // Runs after the first test: code 5 is adopted in the registry, by the new region's etcd.
    const three = ['--etcd', regionThree, '--registry', registry, '--config', deployment];
    const two = ['--etcd', regionTwo, '--registry', registry, '--config', deployment];
    // An operator who cannot reach the registry initialises another (here region 3's etcd, another prefix): every
    // region of the file follows the first, so init exits 4 and no region's memory moves (docs/design.md §8).
    const otherInit = await idgen([
      'spare',
      'init',
      '--registry',
      regionThree,
      '--registry-prefix',
      '/other-registry',
      '--config',
      deployment,
    ]);
    expect(otherInit).toMatchObject({ code: 4, stdout: '' });
    expect(otherInit.stderr).toMatch(
      /^idgen spare init: region r\d \(\S+\) follows the spare-code registry of cluster \d+, prefix \/idgen, deployment \S+, not this one \(cluster \d+, prefix \/other-registry/m,
    );
    expect(await idgen(['spare', 'lend', '6', '--to-region', '2', ...two])).toMatchObject({ code: 0 });
    // Region 2's mirror of code 6 (read through the deployment file) refuses it before the registry is asked; the
    // registry would say the same (spare-registry.spec.ts).
    const second = await idgen(['spare', 'lend', '6', '--to-region', '3', ...three]);
    expect(second).toMatchObject({ code: 4, stdout: '' });
    expect(second.stderr).toMatch(
      /^idgen spare lend: \/idgen\/spare-codes\/6 in region r2 \(\S+\) says spare code 6 is lent \(lent to region 2\), which contradicts this lend/m,
    );
    const adoptedElsewhere = await idgen(['spare', 'lend', '5', '--to-region', '3', ...three]);
    expect(adoptedElsewhere.code).toBe(4);
    expect(adoptedElsewhere.stderr).toMatch(
      /^idgen spare lend: .*says spare code 5 is (reclaimed|adopted).*contradicts this lend/m,
    );
    // Region 3's etcd recorded neither.
    const list = await idgenJson<{ codes: { code: number; record: unknown; registry: { state: string } | null }[] }>([
      'spare',
      'list',
      ...three,
    ]);
    expect(list.json.codes.map((c) => [c.code, c.record, c.registry?.state ?? null])).toEqual([
      [5, null, 'adopted'],
      [6, null, 'lent'],
      [7, null, null],
    ]);
  });

  it('a registry that does not answer: lend, reclaim and adopt exit 3 within --timeout-ms and write nothing', async () => {
    const sockets: Socket[] = [];
    const hole = createServer((socket) => void sockets.push(socket)); // accepts, never answers
    await new Promise<void>((r) => hole.listen(0, '127.0.0.1', () => r()));
    const port = (hole.address() as { port: number }).port;
    try {
      for (const dead of ['http://127.0.0.1:9', `http://127.0.0.1:${port}`]) {
        const flags = ['--registry', dead, '--config', deployment, '--timeout-ms', '1500'];
        const timed = async (args: string[]): Promise<string> => {
          const start = Date.now();
          const r = await idgen(args);
          expect(Date.now() - start).toBeLessThan(1500 + 5000); // the timeout, and the CLI's own start-up
          expect(r).toMatchObject({ code: 3, stdout: '' });
          expect(r.stderr).toContain(`the spare-code registry ${dead}`);
          return r.stderr;
        };
        await timed(['spare', 'lend', '7', '--to-region', '3', '--etcd', regionThree, ...flags]);
        // Code 6 is lent to region 2 (the test before): the reclaim leaves it lent.
        await timed(['spare', 'reclaim', '6', '--handover', join(dir, 'never.json'), '--etcd', regionTwo, ...flags]);
        const handover = join(dir, 'code-5.json');
        expect(
          await idgen([
            'region',
            'init',
            '--sole-cluster',
            '--region',
            '5',
            '--etcd',
            regionThree,
            '--etcd-prefix',
            '/other',
          ]),
        ).toMatchObject({ code: 0 });
        await timed([
          'spare',
          'adopt',
          '5',
          '--handover',
          handover,
          '--etcd',
          regionThree,
          '--etcd-prefix',
          '/other',
          ...flags,
        ]);
        const codes = async (etcd: string[]) =>
          (await idgenJson<{ codes: { code: number; record: { state: string } | null }[] }>(['spare', 'list', ...etcd]))
            .json.codes;
        expect((await codes(['--etcd', regionThree])).find((c) => c.code === 7)?.record).toBeNull();
        expect((await codes(['--etcd', regionTwo])).find((c) => c.code === 6)?.record).toMatchObject({ state: 'lent' });
        expect((await codes(['--etcd', regionThree, '--etcd-prefix', '/other'])).every((c) => c.record === null)).toBe(
          true,
        );
        const slots = await idgenJson<SlotsJson>(['leases', '--etcd', regionThree, '--etcd-prefix', '/other']);
        expect(slots.json.slots).toEqual([]);
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((r) => hole.close(() => r()));
    }
  });

  it('a read-only operator cannot lend: exit 1 saying which keys need a writing role', async () => {
    const url = (await startEtcd()).clientUrl;
    expect(await idgen(['region', 'init', '--sole-cluster', '--region', '2', '--etcd', url])).toMatchObject({
      code: 0,
    });
    // A registry of its own (its prefix), initialised while the etcd has no auth yet.
    const plain = join(dir, 'ro-plain.json');
    writeFileSync(plain, JSON.stringify({ regions: [{ name: 'r2', etcd: [url] }] }));
    expect(
      await idgen(['spare', 'init', '--registry', registry, '--registry-prefix', '/ro-test', '--config', plain]),
    ).toMatchObject({ code: 0 });
    enableEtcdAuth(url, 'root-pw', [
      { name: 'operator', password: 'operator-pw', prefix: '/idgen/', permission: 'read' },
    ]);
    const pw = join(dir, 'operator-pw');
    writeFileSync(pw, 'operator-pw\n', { mode: 0o600 });
    const readOnly = join(dir, 'ro.json');
    writeFileSync(
      readOnly,
      JSON.stringify({ regions: [{ name: 'r2', etcd: [url], user: 'operator', passwordFile: pw }] }),
    );
    const r = await idgen([
      'spare',
      'lend',
      '5',
      '--to-region',
      '2',
      '--etcd',
      url,
      '--etcd-user',
      'operator',
      '--etcd-password-file',
      pw,
      // A registry of its own (its prefix): the registry records the loan; region 2's etcd refuses the mirror.
      '--registry',
      registry,
      '--registry-prefix',
      '/ro-test',
      '--config',
      readOnly,
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^idgen spare lend: etcd denied it .*writes \{prefix\}\/spare-codes\//m);
  });
});
