import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type BuildCase,
  alternation,
  compareBuilds,
  describeCheckout,
  formatBuildsCompared,
  formatRatio,
} from './builds-compared.js';
import type { H2loadResult } from './h2load.js';

const result = (requestsPerSecond: number, p99Us: number, failed = 0): H2loadResult => ({
  requestsPerSecond,
  succeeded: requestsPerSecond,
  failed,
  p50Us: p99Us / 2,
  p99Us,
  p999Us: p99Us * 2,
  samples: requestsPerSecond,
});

const cases: BuildCase[] = [
  { name: 'NextIds(1), Connect', bodyFile: '/w/1.bin', headers: ['a: 1'] },
  { name: 'NextIds(1), gRPC', bodyFile: '/w/3.bin', headers: ['b: 2'] },
];

describe('alternation', () => {
  it('puts before and after in turn, each `rounds` times', () => {
    expect(alternation(2)).toEqual(['before', 'after', 'before', 'after']);
    expect(alternation(3)).toEqual(['before', 'after', 'before', 'after', 'before', 'after']);
  });

  it('rejects zero rounds', () => {
    expect(() => alternation(0)).toThrow(RangeError);
  });
});

describe('compareBuilds', () => {
  it('loads the two ports alternately, case by case, and keeps each build its own rounds', async () => {
    const calls: string[] = [];
    let next = 100;
    const compared = await compareBuilds(
      cases,
      { before: { label: 'old', port: 1 }, after: { label: 'new', port: 2 } },
      (port, c, tag) => {
        calls.push(`${c.name}@${port} ${tag}`);
        return Promise.resolve(result(next++, 500));
      },
    );
    expect(calls).toEqual([
      'NextIds(1), Connect@1 build-0-before-1',
      'NextIds(1), Connect@2 build-0-after-1',
      'NextIds(1), Connect@1 build-0-before-2',
      'NextIds(1), Connect@2 build-0-after-2',
      'NextIds(1), gRPC@1 build-1-before-1',
      'NextIds(1), gRPC@2 build-1-after-1',
      'NextIds(1), gRPC@1 build-1-before-2',
      'NextIds(1), gRPC@2 build-1-after-2',
    ]);
    expect(compared.rounds).toBe(2);
    expect(compared.rows[0]?.before.map((r) => r.requestsPerSecond)).toEqual([100, 102]);
    expect(compared.rows[0]?.after.map((r) => r.requestsPerSecond)).toEqual([101, 103]);
    expect(compared.rows[1]?.c).toBe(cases[1]);
  });
});

describe('formatBuildsCompared', () => {
  it("prints each case's medians, their ratio, the rounds in order and the failures", () => {
    const text = formatBuildsCompared(
      {
        before: { label: '2f8b955 (/tmp/base)', port: 1 },
        after: { label: '23dac95 (/work/main)', port: 2 },
        rounds: 2,
        rows: [
          {
            c: cases[0] as BuildCase,
            before: [result(100_000, 800), result(110_000, 1000)],
            after: [result(150_000, 400, 1), result(160_000, 600)],
          },
        ],
      },
      10,
    );
    expect(text).toContain('before = 2f8b955 (/tmp/base); after = 23dac95 (/work/main)');
    expect(text).toContain('2 rounds each of 10 s');
    const row = text.split('\n').find((line) => line.startsWith('NextIds(1), Connect'));
    expect(row?.split(/\s{2,}/)).toEqual([
      'NextIds(1), Connect',
      '105,000',
      '155,000',
      '1.48×',
      '900.00 µs',
      '500.00 µs',
      '100,000 / 110,000',
      '150,000 / 160,000',
      '1',
    ]);
  });
});

describe('formatRatio', () => {
  it('is after over before with two decimals, n/a without a before', () => {
    expect(formatRatio(91, 100)).toBe('0.91×');
    expect(formatRatio(250, 100)).toBe('2.50×');
    expect(formatRatio(1, 0)).toBe('n/a');
    expect(formatRatio(Number.NaN, 100)).toBe('n/a');
  });
});

describe('describeCheckout', () => {
  it('uses the name given, else the directory when git cannot read a commit there', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-checkout-'));
    try {
      expect(describeCheckout(dir, '2f8b955')).toBe(`2f8b955 (${dir})`);
      expect(describeCheckout(dir)).toBe(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
