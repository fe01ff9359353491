import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { runCli } from './cli.js';

const BIN = resolve(__dirname, '../bin/idgen.js');

/** Runs the real, built `idgen` binary in a child process. */
function idgen(...args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 20_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

async function run(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out, err };
}

describe('idgen decode (the built binary)', () => {
  it('prints the seed example exactly as DESIGN §6 shows', () => {
    const r = idgen('decode', '104148763141017605');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(
      '{"id":"104148763141017605","timestampMs":24831000123,"time":"2024-10-14T09:30:00.123Z","region":2,"worker":17,"sequence":5}\n',
    );
  });

  it('prints one line per ID, and exits 2 with a one-line message for an invalid one', () => {
    const r = idgen('decode', '0', '12a4', '9223372036854775807');
    expect(r.code).toBe(2);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { id: string });
    expect(lines.map((l) => l.id)).toEqual(['0', '9223372036854775807']);
    expect(r.stderr.trim().split('\n')).toEqual([
      'idgen decode: "12a4" is not a decimal integer (digits only, no sign, no leading zeros)',
    ]);
  });

  it('explains each verb in --help', () => {
    const r = idgen('--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/decode \[options\] <id\.\.\.>/);
    expect(r.stdout).toMatch(/print the fields of each ID/);
  });
});

describe('runCli', () => {
  it.each([
    ['-1', /negative/],
    ['9223372036854775808', /above 9223372036854775807/],
    ['', /must not be empty/],
    ['1.5', /not a decimal integer/],
  ])('refuses %j with exit code 2', async (id, message) => {
    const r = await run('decode', id);
    expect(r.code).toBe(2);
    expect(r.out).toEqual([]);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toMatch(message);
  });

  it('decodes with another epoch given as ISO or Unix milliseconds', async () => {
    for (const epoch of ['1970-01-01T00:00:00Z', '0']) {
      const r = await run('decode', '--epoch', epoch, '4194305');
      expect(r.code).toBe(0);
      expect(JSON.parse(r.out[0] ?? '')).toEqual({
        id: '4194305', timestampMs: 1, time: '1970-01-01T00:00:00.001Z', region: 0, worker: 0, sequence: 1,
      });
    }
  });

  it.each([['yesterday'], ['2024-01-01'], ['-5']])('refuses --epoch %j with exit code 2', async (epoch) => {
    const r = await run('decode', '--epoch', epoch, '1');
    expect(r.code).toBe(2);
    expect(r.err.join('\n')).toMatch(/--epoch|option/);
  });

  it('exits 2 on a missing ID or an unknown verb', async () => {
    expect((await run('decode')).code).toBe(2);
    expect((await run('frobnicate')).code).toBe(2);
  });
});
