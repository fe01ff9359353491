/**
 * Chaos over regions end to end (issue 25, item 2): the built `npm run chaos` with `--regions 3` and one fault of each
 * region kind (`region-pool-down`, `region-etcd-down`), real etcds and real server processes on loopback. It asserts
 * what must hold (0 duplicates over every region's IDs, every fallback ID carrying its region's code, a failover table
 * with a row and figures per fault); the figures themselves are printed, never judged as speed.
 *
 * Needs the built server, CLI and chaos tool (the test target builds them: `npx nx run @idgen/chaos:test`), etcd and
 * libfaketime (docs/toolchain.md); a missing one fails here, naming it.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeId } from '@idgen/core';
import { cleanupAll } from '@idgen/testing';
import { runBuiltChaos } from './built-run.test-helper.js';

jest.setTimeout(150_000);

interface Row {
  label: string;
  region: number;
  callers: number;
  failoverMs: number[];
  returnMs: number[];
  failedCalls: number;
}

interface ReportJson {
  violations: number;
  duplicates: { checked: number; duplicates: number };
  handedOutDuplicates: { duplicates: number };
  regions: {
    regions: { code: number; callers: number[] }[];
    rows: Row[];
    wrongCode: number;
    fallbackBlocksChecked: number;
  };
}

afterAll(async () => {
  await cleanupAll();
});

describe('chaos over regions (--regions 3)', () => {
  it('fails over on a region pool down and a region etcd down: 0 duplicates, fallback IDs carry their code', async () => {
    const run = await runBuiltChaos<ReportJson>('idgen-chaos-regions', [
      '--regions',
      '3',
      '--faults',
      'region-pool-down,region-etcd-down',
      '--duration',
      '34',
      '--seed',
      '20261202',
      '--callers',
      '2',
      '--embedded',
      '0',
      '--nodes',
      '3',
      '--slots',
      '2',
    ]);
    const { exit, text, out } = run;
    expect(exit.code).toBe(0);
    expect(text).toMatch(/^VERDICT: PASS/m);

    const r = await run.report();
    expect(r.violations).toBe(0);
    expect(r.duplicates.duplicates).toBe(0);
    expect(r.handedOutDuplicates.duplicates).toBe(0);
    expect(r.duplicates.checked).toBeGreaterThan(10_000);
    expect(r.regions.wrongCode).toBe(0);
    expect(r.regions.fallbackBlocksChecked).toBeGreaterThan(0);
    expect(r.regions.rows.map((w) => w.label.replace(/^#\d+ /, '')).sort()).toEqual([
      'region-etcd-down',
      'region-pool-down',
    ]);
    for (const w of r.regions.rows) {
      expect(w.callers).toBe(2);
      expect(w.failoverMs).toHaveLength(2);
      expect(w.returnMs).toHaveLength(2);
      for (const x of [...w.failoverMs, ...w.returnMs]) expect(Number.isFinite(x) && x >= 0).toBe(true);
    }
    expect(text).toMatch(/^ {2}\| #\d+ region-pool-down \| \d \| 2 \| \d+ \/ \d+ \/ \d+ \| \d+ \/ \d+ \/ \d+ \|/m);

    // Apart from the run's own check: every block a caller received, decoded here, carries a region of the run, and
    // the callers homed in a region that was hit got blocks of another region (their fallback) too.
    const hit = new Set(r.regions.rows.map((w) => w.region));
    const homes = new Map(r.regions.regions.flatMap((g) => g.callers.map((c) => [c, g.code] as const)));
    const files = (await readdir(out)).filter((f) => /^caller-\d+\.blocks\.jsonl$/.test(f));
    expect(files).toHaveLength(homes.size);
    let away = 0;
    for (const f of files) {
      const caller = Number(/\d+/.exec(f)?.[0]);
      const home = homes.get(caller);
      const lines = (await readFile(join(out, f), 'utf8')).split('\n').filter((l) => l !== '');
      for (const l of lines) {
        const b = JSON.parse(l) as { first: string; count: number };
        const code = decodeId(BigInt(b.first)).region;
        expect([1, 2, 3]).toContain(code);
        if (home !== undefined && hit.has(home) && code !== home) away++;
      }
    }
    expect(away).toBeGreaterThan(0);
  });
});
