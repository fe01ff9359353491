// Options the source does not know are refused at once, in the library's own words (issue 33): a natural guess
// (`etcd: { ca, cert, key, user, passwordFile }`, the CLI's names) must not be ignored and then fail later with a
// message naming CLI flags. No etcd: the check runs before any I/O.
import { createEmbeddedIdSource, type EmbeddedIdSourceOptions } from '../src/index.js';

const create = (options: unknown) => () => createEmbeddedIdSource(options as EmbeddedIdSourceOptions);

describe('createEmbeddedIdSource refuses unknown options', () => {
  it('the CLI-shaped guess at etcd TLS and auth: a TypeError naming each option and the shape etcd takes', () => {
    expect(
      create({
        etcd: {
          endpoints: ['https://127.0.0.1:1'],
          ca: 'ca.crt',
          cert: 'tls.crt',
          key: 'tls.key',
          user: 'u',
          passwordFile: 'p',
        },
        region: 2,
      }),
    ).toThrow(
      new TypeError(
        'createEmbeddedIdSource: unknown options "ca", "cert", "key", "user", "passwordFile" in etcd; etcd takes ' +
          'endpoints, tls, auth, prefix (TLS as etcd.tls: { ca, cert, key }, PEM text, not file paths; a user as ' +
          'etcd.auth: { username, password })',
      ),
    );
  });

  it('a misspelt top-level option, and unknown names in etcd.tls, etcd.auth and backoff', () => {
    const etcd = { endpoints: ['http://127.0.0.1:1'] };
    expect(create({ etcd, region: 2, timesource: 'none' })).toThrow(
      /^createEmbeddedIdSource: unknown option "timesource"; the options are etcd, region, workers, .*timeSource/,
    );
    expect(create({ etcd: { ...etcd, tls: { caFile: '/x' } }, region: 2 })).toThrow(
      'createEmbeddedIdSource: unknown option "caFile" in etcd.tls; etcd.tls takes ca, cert, key (PEM text, not file paths: read the files with fs.readFileSync)',
    );
    expect(create({ etcd: { ...etcd, auth: { user: 'u', password: 'p' } }, region: 2 })).toThrow(
      'createEmbeddedIdSource: unknown option "user" in etcd.auth; etcd.auth takes username, password',
    );
    expect(create({ etcd, region: 2, backoff: { initial: 5 } })).toThrow(
      'createEmbeddedIdSource: unknown option "initial" in backoff; backoff takes initialMs, maxMs',
    );
  });

  it('an option set to undefined counts as absent (spread configuration objects)', () => {
    // Past the option check, the next check (the workers range) is the one that refuses.
    expect(
      create({ etcd: { endpoints: ['http://127.0.0.1:1'] }, region: 2, somethingElse: undefined, workers: 'x-y' }),
    ).toThrow(/workers must look like/);
  });
});
