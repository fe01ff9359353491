import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, spawnProcess, tsNodeArgs } from '@idgen/testing';
import { SERVER_MAIN, buildServer } from '../src/idgen-server.js';

const SAMPLE = 20_000;

/** The cells of the table row whose first cell starts with `name` (cells are two or more spaces apart). */
function row(lines: readonly string[], name: string): string[] {
  const line = lines.find((l) => l.startsWith(name));
  if (line === undefined) throw new Error(`no row for ${name} in:\n${lines.join('\n')}`);
  return line.split(/ {2,}/);
}

/** `"12,345 / 19,999 (+1 equal)"` → its counts. */
function orderCell(cell: string | undefined): { outOfOrder: number; pairs: number; equal: number } {
  const m = /^([\d,]+) \/ ([\d,]+)(?: \(\+([\d,]+) equal\))?$/.exec(cell ?? '');
  if (m === null) throw new Error(`not an ordering cell: ${String(cell)}`);
  const n = (s: string | undefined): number => Number((s ?? '0').replaceAll(',', ''));
  return { outOfOrder: n(m[1]), pairs: n(m[2]), equal: n(m[3]) };
}

// bench:ids run for real (a real etcd, a real standalone node, the embedded source's lease) in its quickest form:
// one round of 20 ms per generator and a small ordering sample. What is checked is the table, not the figures:
// every row is there, and each ordering count agrees with what the generator promises. No timing is asserted.
describe('bench:ids (ids-compared.bench.ts) in a tiny run', () => {
  let lines: readonly string[] = [];

  beforeAll(async () => {
    if (!existsSync(SERVER_MAIN)) buildServer(); // the bench starts the built node; Nx builds it at most once
    const bench = spawnProcess(
      process.execPath,
      tsNodeArgs(
        join(__dirname, '..', 'src', 'ids-compared.bench.ts'),
        '--no-build',
        '--rounds',
        '1',
        '--round-ms',
        '20',
        '--check',
        String(SAMPLE),
      ),
    );
    const exit = await bench.exited;
    if (exit.code !== 0) throw new Error(`bench:ids exited ${String(exit.code)}:\n${bench.tail(40)}`);
    lines = bench.stdoutLines;
  }, 120_000);

  afterAll(cleanupAll);

  it('prints one row per generator, each with every column filled', () => {
    const names = [
      'crypto.randomUUIDv7()',
      'uuid ',
      '@idgen/core mintOne(Date.now())',
      '@idgen/embedded nextIdSync()',
      '@idgen/client await nextId()',
    ];
    const header = row(lines, 'generator');
    expect(header).toEqual([
      'generator',
      'bytes per ID',
      'ordering promised',
      'out of order / pairs',
      'decodable fields',
      'IDs/s (median)',
      'min-max of rounds',
      '× randomUUIDv7()',
      'infrastructure',
    ]);
    for (const name of names) {
      const cells = row(lines, name).map((c) => c.trim());
      expect(cells).toHaveLength(header.length);
      for (const cell of cells) expect(cell).not.toBe('');
      expect(cells[5]).toMatch(/^[\d,]+$/);
      expect(cells[7]).toMatch(/^×\d+\.\d\d$/);
    }
    expect(row(lines, 'crypto.randomUUIDv7()')[7]).toBe('×1.00'); // the baseline of its own ratio
    expect(row(lines, 'crypto.randomUUIDv7()')[1]).toBe('16 (36 as text)');
    expect(row(lines, '@idgen/client await nextId()')[1]).toBe('8 (≤ 19 as text)');
  });

  it('counts no pair out of order for idgen (per worker) nor for the uuid package (its counter)', () => {
    for (const name of ['uuid ', '@idgen/core', '@idgen/embedded', '@idgen/client']) {
      expect({ name, ...orderCell(row(lines, name)[3]) }).toEqual({
        name,
        outOfOrder: 0,
        equal: 0,
        pairs: SAMPLE - 1,
      });
    }
  });

  it('counts pairs out of order for crypto.randomUUIDv7(), random within a millisecond', () => {
    // 20,000 calls span a few milliseconds at most, so most pairs share one: about half of them come out
    // reversed. Never more than the pairs compared, and never 0 (that would be a counter, not random bits).
    const crypto = orderCell(row(lines, 'crypto.randomUUIDv7()')[3]);
    expect(crypto.pairs).toBe(SAMPLE - 1);
    expect(crypto.outOfOrder).toBeGreaterThan(0);
    expect(crypto.outOfOrder + crypto.equal).toBeLessThanOrEqual(crypto.pairs);
  });
});
