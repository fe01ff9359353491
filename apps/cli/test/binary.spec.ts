// The real, built `idgen` binary in a child process (docs/style.md: specs that start processes live in test/); the
// verbs' parsing and output in-process are src/cli.spec.ts and src/forms.spec.ts.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createIdForms } from '@idgen/core';

const BIN = resolve(__dirname, '../bin/idgen.js');
/**
 * A hang guard, not a pace: a verb that never ends fails here. 20 s killed eight healthy `--help` runs at load 40-50
 * (status null: node had not even loaded the CLI).
 */
const HANG_MS = 120_000;

/** Runs the real, built `idgen` binary in a child process, `input` on its stdin. */
function idgen(...args: string[]) {
  return idgenWithStdin(undefined, ...args);
}

function idgenWithStdin(input: string | undefined, ...args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: HANG_MS, input });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('idgen decode (the built binary)', () => {
  it('prints the seed example exactly as docs/design.md §6 shows', () => {
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
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string });
    expect(lines.map((l) => l.id)).toEqual(['0', '9223372036854775807']);
    expect(r.stderr.trim().split('\n')).toEqual([
      'idgen decode: "12a4" is not a decimal integer (digits only, no sign, no leading zeros)',
    ]);
  });

  it('lists each verb and the exit codes in --help', () => {
    const r = idgen('--help');
    expect(r.code).toBe(0);
    for (const verb of ['next', 'status', 'leases', 'layout', 'decode'])
      expect(r.stdout).toMatch(new RegExp(`^  ${verb} \\[options\\]`, 'm'));
    expect(r.stdout).toMatch(/print the fields of each ID/);
    expect(r.stdout).toMatch(
      /Exit codes:\n {2}0 {2}ok.*\n {2}1 {2}.*not serving[\s\S]*\n {2}2 {2}bad usage.*\n {2}3 {2}could not reach etcd/,
    );
  });

  it.each([
    ['next', /-n, --count <n>[\s\S]*--server <url>[\s\S]*--region <code>[\s\S]*--etcd <urls>[\s\S]*--json/],
    ['status', /--server <url>[\s\S]*--etcd-prefix <prefix>[\s\S]*--etcd-ca <file>[\s\S]*--timeout-ms <ms>/],
    ['leases', /--region <code>[\s\S]*--etcd-user <name>[\s\S]*--etcd-password-file <file>[\s\S]*POISONED/],
    ['layout', /layout record[\s\S]*--etcd <urls>/],
    ['decode', /\[id\.\.\.\][\s\S]*hex\s+with 0x[\s\S]*stdin[\s\S]*--etcd <urls>/],
    ['spare', /lend[\s\S]*reclaim[\s\S]*adopt[\s\S]*list/],
  ])('explains %s in its own --help', (verb, pattern) => {
    const r = idgen(verb, '--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(pattern);
  });

  // Issue 22: a read-only verb's --etcd-user asks for the read-only role; the verbs that write say they write.
  it.each([
    ['layout', /its role must read the prefix \(idgen-operator\)/],
    ['leases', /its role must read the prefix \(idgen-operator\)/],
    ['status', /its role must read the prefix \(idgen-operator\)/],
    ['audit', /its role must read the prefix \(idgen-operator\)/],
  ])("%s --help: --etcd-user's role only reads", (verb, pattern) => {
    const r = idgen(verb, '--help');
    expect(r.stdout.replace(/\s+/g, ' ')).toMatch(pattern);
    expect(r.stdout).not.toMatch(/reads and writes/);
    expect(r.stdout.replace(/\s+/g, ' ')).toMatch(
      /--dial-timeout-ms <ms>.*\(default: "2000", env: IDGEN_DIAL_TIMEOUT_MS\)/,
    );
  });

  it("region init --help: --etcd-user's role writes", () => {
    expect(idgen('region', 'init', '--help').stdout.replace(/\s+/g, ' ')).toMatch(/its role must write the keys/);
  });

  it('prints the package version for --version', () => {
    const r = idgen('--version');
    expect(r.code).toBe(0);
    const pkg = JSON.parse(readFileSync(resolve(__dirname, '../package.json'), 'utf8')) as { version: string };
    expect(r.stdout).toBe(`${pkg.version}\n`);
  });

  it('reads IDs from stdin, one a line or separated by spaces, decimal or hex', () => {
    const r = idgenWithStdin('104148763141017605\n0x17202bf8ed11005  4194305\n', 'decode');
    expect(r.code).toBe(0);
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; worker: number });
    expect(lines.map((l) => l.id)).toEqual(['104148763141017605', '104148763141017605', '4194305']);
  });
});

// docs/design.md §1 "Forms": `idgen format --to` converts, here through the binary's stdin.
describe('idgen format (the built binary)', () => {
  const ID = '104148763141017605';
  const forms = createIdForms({ key: '000102030405060708090a0b0c0d0e0f' });
  const BASE32 = forms.format(BigInt(ID), 'base32');
  const PADDED = forms.format(BigInt(ID), 'decimal');

  it('needs --to, and reads IDs from stdin (the built binary)', () => {
    const r = idgenWithStdin(`${ID}\n${PADDED}\n`, 'format', '--to', 'base32');
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${BASE32}\n${BASE32}\n`);
    const missing = idgen('format', ID);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/required option '--to <form>'/);
  });
});
