import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './cli.js';
import { renderTable } from './table.js';

// The verbs in-process; the built binary in a child process is test/binary.spec.ts.
async function run(...argv: string[]) {
  return runWithStdin(undefined, ...argv);
}

async function runWithStdin(stdin: string | undefined, ...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    readStdin: () => Promise.resolve(stdin),
  });
  return { code, out, err };
}

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
        id: '4194305',
        timestampMs: 1,
        time: '1970-01-01T00:00:00.001Z',
        region: 0,
        worker: 0,
        sequence: 1,
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

describe('runCli: decode in hex and from stdin', () => {
  it('decodes 0x hex as the same ID as its decimal', async () => {
    const hex = await run('decode', '0x17202bf8ed11005', '0X7FFFFFFFFFFFFFFF');
    const dec = await run('decode', '104148763141017605', '9223372036854775807');
    expect(hex.code).toBe(0);
    expect(hex.out).toEqual(dec.out);
  });

  it.each([
    ['0x8000000000000000', /above 0x7fffffffffffffff/],
    // Issue 22: a hex input is told what is wrong with it as hex, not that it is no decimal integer.
    ['0x', /^idgen decode: "0x" is not a hex ID: give its digits after 0x \(0-9, a-f\)$/],
    ['0xfg', /^idgen decode: "0xfg" is not a hex ID: after 0x only hex digits/],
  ])('refuses %j with exit code 2', async (id, message) => {
    const r = await run('decode', id);
    expect(r.code).toBe(2);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toMatch(message);
  });

  it('reads stdin when no ID is given; an invalid one is reported and the rest still printed (exit 2)', async () => {
    const r = await runWithStdin(' 0\n\n12a4\t0x1 \n', 'decode');
    expect(r.code).toBe(2);
    expect(r.out.map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(['0', '1']);
    expect(r.err).toEqual(['idgen decode: "12a4" is not a decimal integer (digits only, no sign, no leading zeros)']);
  });

  it('exits 2 when stdin holds no ID', async () => {
    const r = await runWithStdin(' \n', 'decode');
    expect(r.code).toBe(2);
    expect(r.err).toEqual(['idgen decode: no IDs on stdin']);
  });
});

describe('runCli: usage errors exit 2 before any I/O', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'idgen-cli-'));
    writeFileSync(join(dir, 'ca.pem'), '-----BEGIN CERTIFICATE-----\n');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each([
    [['status'], /give either --server or --etcd/],
    [['status', '--server', 'http://127.0.0.1:1', '--etcd', 'http://127.0.0.1:2'], /give either --server or --etcd/],
    [['next', '--etcd', 'http://127.0.0.1:2379'], /--etcd needs --region/],
    [['next', '-n', '0', '--server', '127.0.0.1:1'], /-n must be an integer from 1 to 65536, got "0"/],
    [['next', '-n', '65537', '--server', '127.0.0.1:1'], /-n must be an integer from 1 to 65536/],
    [['next', '--server', 'ftp://x:1'], /--server "ftp:\/\/x:1" is not a node URL/],
    [['status', '--etcd', 'http://127.0.0.1:2379', '--region', 'two'], /--region must be an integer/],
    [['leases', '--etcd', 'nope'], /invalid etcd options: --etcd: endpoint "nope" is not an etcd client URL/],
    [['leases'], /--etcd is required/],
    [['leases', '--etcd', 'http://127.0.0.1:2379', '--etcd-prefix', 'idgen/'], /prefix must start with "\/"/],
    [['leases', '--etcd', 'http://127.0.0.1:2379', '--timeout-ms', '0'], /--timeout-ms must be an integer from 1/],
    [
      ['layout', '--etcd', 'http://127.0.0.1:2379', '--etcd-ca', '/nonexistent/ca.pem'],
      /--etcd-ca: cannot read the etcd CA file "\/nonexistent\/ca.pem" \(ENOENT\)/,
    ],
    [['layout', '--etcd', 'http://127.0.0.1:2379', '--etcd-cert', '/x.pem'], /--etcd-cert and --etcd-key go together/],
    [
      ['layout', '--etcd', 'http://127.0.0.1:2379', '--etcd-user', 'root'],
      /--etcd-user and --etcd-password-file go together/,
    ],
    [['status', '--region', '1', '--frobnicate'], /unknown option '--frobnicate'/],
  ])('%j', async (argv, message) => {
    const r = await run(...argv);
    expect(r.code).toBe(2);
    expect(r.out).toEqual([]);
    expect(r.err.join('\n')).toMatch(message);
  });

  it('refuses TLS files with an http:// endpoint (https:// carries TLS)', async () => {
    const r = await run('layout', '--etcd', 'http://127.0.0.1:2379', '--etcd-ca', join(dir, 'ca.pem'));
    expect(r.code).toBe(2);
    expect(r.err.join('\n')).toMatch(/tls is set but an endpoint uses http:\/\//);
  });
});

describe('renderTable', () => {
  it('aligns columns two spaces apart, shows empty cells as -, trims trailing spaces', () => {
    expect(
      renderTable(
        ['A', 'BBB', 'C'],
        [
          ['xx', '', 'z'],
          ['y', 'long value', ''],
        ],
      ),
    ).toEqual(['A   BBB         C', 'xx  -           z', 'y   long value  -']);
  });
});
