import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ETCD_FLAGS, etcdConnectionFromFlags, type EtcdFlagValues } from './flags.js';
import { LeaseConfigError } from './errors.js';

// Not a real certificate or key: the function checks the PEM armour, etcd3 and TLS check the contents.
const CERT = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const KEY = '-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n';

describe('etcdConnectionFromFlags', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'idgen-flags-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, text: string): string => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };
  const flag = (name: string, value: string) => ({ name, value });
  const problems = (flags: EtcdFlagValues): readonly string[] => {
    try {
      etcdConnectionFromFlags(flags);
    } catch (e) {
      if (e instanceof LeaseConfigError) return e.problems;
      throw e;
    }
    throw new Error('expected a LeaseConfigError');
  };

  it('splits the URLs, reads the files and trims the password line', () => {
    expect(
      etcdConnectionFromFlags({
        etcd: flag('--etcd', ' https://10.0.0.1:2379, https://10.0.0.2:2379 ,'),
        prefix: flag('--etcd-prefix', '/p'),
        ca: flag('--etcd-ca', file('ca.pem', CERT)),
        cert: flag('--etcd-cert', file('c.pem', CERT)),
        key: flag('--etcd-key', file('c.key', KEY)),
        user: flag('--etcd-user', 'node'),
        passwordFile: flag('--etcd-password-file', file('pw', 's3cret\r\n')),
      }),
    ).toEqual({
      endpoints: ['https://10.0.0.1:2379', 'https://10.0.0.2:2379'],
      prefix: '/p',
      tls: { ca: CERT, cert: CERT, key: KEY },
      auth: { username: 'node', password: 's3cret' },
    });
    expect(etcdConnectionFromFlags({ etcd: flag('--etcd', 'http://127.0.0.1:2379') })).toEqual({
      endpoints: ['http://127.0.0.1:2379'],
      prefix: '/idgen',
    });
  });

  it('names the flag, or the variable it came from, in every problem, and lists them all', () => {
    expect(
      problems({
        etcd: flag('IDGEN_ETCD', 'localhost:2379'),
        prefix: flag('IDGEN_ETCD_PREFIX', 'idgen/'),
      }),
    ).toEqual([
      'IDGEN_ETCD: endpoint "localhost:2379" is not an etcd client URL like http://127.0.0.1:2379',
      'IDGEN_ETCD_PREFIX: prefix must start with "/", not end with "/", and use letters, digits, "._-/", got "idgen/"',
    ]);
    expect(problems({ etcd: flag('--etcd', ' , ') })).toEqual([
      '--etcd must list at least one etcd URL (http://host:port), got " , "',
    ]);
    const missing = join(dir, 'missing.pem');
    expect(
      problems({
        etcd: flag('--etcd', 'https://127.0.0.1:2379'),
        ca: flag('IDGEN_ETCD_CA', missing),
        cert: flag('--etcd-cert', file('not-a-cert', 'hello')),
        user: flag('--etcd-user', 'u'),
      }),
    ).toEqual([
      '--etcd-cert and --etcd-key go together: give both or neither',
      '--etcd-user and --etcd-password-file go together: give both or neither',
      `IDGEN_ETCD_CA: cannot read the etcd CA file ${JSON.stringify(missing)} (ENOENT)`,
      `--etcd-cert: ${JSON.stringify(join(dir, 'not-a-cert'))} is not a PEM certificate`,
    ]);
    expect(
      problems({
        etcd: flag('--etcd', 'https://127.0.0.1:2379'),
        cert: flag('--etcd-cert', file('c2.pem', CERT)),
        key: flag('--etcd-key', file('k2', CERT)),
        user: flag('--etcd-user', 'u'),
        passwordFile: flag('--etcd-password-file', file('empty', ' \n')),
      }),
    ).toEqual([
      '--etcd-key: not a PEM private key',
      `--etcd-password-file: ${JSON.stringify(join(dir, 'empty'))} is empty`,
    ]);
  });

  it('refuses TLS files with an http:// endpoint (the connection would go in clear)', () => {
    expect(
      problems({ etcd: flag('--etcd', 'http://127.0.0.1:2379'), ca: flag('--etcd-ca', file('ca2', CERT)) }),
    ).toEqual(['--etcd: tls is set but an endpoint uses http://; use https:// endpoints with tls']);
  });

  it('declares the flags both tools share, each once, with the prefix default', () => {
    const names = ETCD_FLAGS.map((f) => f.flags.split(' ')[0]);
    expect(names).toEqual([
      '--etcd-prefix',
      '--etcd-ca',
      '--etcd-cert',
      '--etcd-key',
      '--etcd-user',
      '--etcd-password-file',
    ]);
    expect(ETCD_FLAGS[0]).toMatchObject({ defaultValue: '/idgen' });
  });
});
