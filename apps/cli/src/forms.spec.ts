import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createIdForms } from '@idgen/core';
import { runCli } from './cli.js';

// `idgen decode` reads every form of docs/design.md §1 "Forms" and says which; `idgen format --to` converts.
const ID = '104148763141017605';
const KEY = '000102030405060708090a0b0c0d0e0f';
const forms = createIdForms({ key: KEY });
const BASE32 = forms.format(BigInt(ID), 'base32');
const PADDED = forms.format(BigInt(ID), 'decimal');
const SPREAD = forms.format(BigInt(ID), 'spread').toString();
const KEYED = forms.format(BigInt(ID), 'keyed').toString();

let dir: string;
let keyFile: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'idgen-forms-'));
  keyFile = join(dir, 'key.hex');
  writeFileSync(keyFile, `${KEY}\n`);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function run(stdin: string | undefined, ...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    readStdin: () => Promise.resolve(stdin),
  });
  return { code, out, err };
}

const decoded = (line: string | undefined) => JSON.parse(line ?? '{}') as { id: string; form?: string; region: number };

describe('idgen decode in every form', () => {
  it('reads base32 (either case, with the aliases) and zero-padded decimal by their shape, and says so', async () => {
    const r = await run(undefined, 'decode', BASE32, BASE32.toLowerCase().replaceAll('0', 'o'), PADDED, ID);
    expect(r.err).toEqual([]);
    expect(r.code).toBe(0);
    expect(r.out.map(decoded).map((d) => [d.id, d.form])).toEqual([
      [ID, 'base32'],
      [ID, 'base32'],
      [ID, 'decimal'],
      [ID, undefined],
    ]);
    // The plain ID prints exactly as before the forms.
    expect(r.out[3]).toBe(
      '{"id":"104148763141017605","timestampMs":24831000123,"time":"2024-10-14T09:30:00.123Z","region":2,"worker":17,"sequence":5}',
    );
  });

  it('reads the spread form with --from spread and the keyed form with --key-file', async () => {
    const spread = await run(undefined, 'decode', '--from', 'spread', SPREAD);
    expect(spread.out.map(decoded)).toMatchObject([{ id: ID, form: 'spread', region: 2 }]);
    const keyed = await run(`${KEYED}\n`, 'decode', '--key-file', keyFile);
    expect(keyed.err).toEqual([]);
    expect(keyed.out.map(decoded)).toMatchObject([{ id: ID, form: 'keyed', region: 2 }]);
  });

  it.each([
    [['decode', '--from', 'hex', ID], /--from "hex" is not a form: give plain, base32, decimal, spread, keyed/],
    [['decode', '--from', 'keyed', ID], /the keyed form needs the deployment key: give --key-file/],
    [
      ['decode', '--key-file', '/nonexistent/key.hex', ID],
      /--key-file \/nonexistent\/key.hex: cannot read it \(ENOENT\)/,
    ],
    [['decode', '1234567890123'], /both a plain ID and a base32 one: say --from plain or --from base32/],
    [['decode', '--from', 'base32', '02WG2QY7D240'], /has 12 characters, the form has exactly 13/],
    [['decode', '02WG2QY7D240'], /not a decimal integer/],
    [['decode', '02WG2QY7D240U'], /"U" at position 13/],
    [['decode', '8ZZZZZZZZZZZZ'], /first character must be 0–7/],
    [['decode', '9999999999999999999'], /above 9223372036854775807/],
    [['decode', '--from', 'decimal', ID], /it has 18 characters, the form has exactly 19/],
  ])('refuses %j with one line and exit 2', async (argv, message) => {
    const r = await run(undefined, ...argv);
    expect(r.code).toBe(2);
    expect(r.out).toEqual([]);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toMatch(message);
  });

  it('refuses a key file that is not a key, naming the file and the length', async () => {
    const bad = join(dir, 'short.hex');
    writeFileSync(bad, 'abcd\n');
    const r = await run(undefined, 'decode', '--key-file', bad, KEYED);
    expect(r.code).toBe(2);
    expect(r.err).toEqual([
      `idgen decode: --key-file ${bad}: a keyed-form key must be 16 to 64 bytes (128–512 bits), got 2`,
    ]);
  });
});

describe('idgen format', () => {
  it('converts an ID to each of the four forms, and back from any of them', async () => {
    const to = async (form: string, ...more: string[]) => (await run(undefined, 'format', '--to', form, ...more)).out;
    expect(await to('base32', ID)).toEqual([BASE32]);
    expect(await to('decimal', ID)).toEqual([PADDED]);
    expect(await to('spread', ID)).toEqual([SPREAD]);
    expect(await to('keyed', '--key-file', keyFile, ID)).toEqual([KEYED]);
    expect(await to('decimal', BASE32, '0x17202bf8ed11005')).toEqual([PADDED, PADDED]);
    expect(await to('base32', '--from', 'spread', SPREAD)).toEqual([BASE32]);
    expect(await to('base32', '--from', 'keyed', '--key-file', keyFile, KEYED)).toEqual([BASE32]);
  });

  it.each([
    [['format', '--to', 'hex', ID], /--to "hex" is not a form: give base32, decimal, spread, keyed/],
    [['format', '--to', 'keyed', ID], /--to keyed needs the deployment key: give --key-file/],
    [['format', '--to', 'base32', '-1'], /negative/],
  ])('refuses %j with one line and exit 2', async (argv, message) => {
    const r = await run(undefined, ...argv);
    expect(r.code).toBe(2);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toMatch(message);
  });
});
