import { cleanupAll, makeTestPki } from '@idgen/testing';
import { TlsMaterialError, tlsFilesFromFlags } from './tls.js';

afterAll(() => cleanupAll());

describe('tlsFilesFromFlags', () => {
  const pki = makeTestPki({ name: 'serving-tls-flags', clients: ['caller'] });
  const flag = (name: string, value: string) => ({ name, value });
  const message = (f: () => unknown): string => {
    try {
      f();
    } catch (e) {
      if (e instanceof TlsMaterialError) return e.message;
      throw e;
    }
    throw new Error('expected a TlsMaterialError');
  };

  it('gives no TLS when no flag is given, and the checked files with mTLS names split', () => {
    expect(tlsFilesFromFlags({})).toBeUndefined();
    expect(
      tlsFilesFromFlags({
        cert: flag('--tls-cert', pki.server.certFile),
        key: flag('--tls-key', pki.server.keyFile),
        clientCa: flag('--tls-client-ca', pki.caFile),
        clientNames: flag('IDGEN_TLS_CLIENT_NAMES', ' caller , other,'),
      }),
    ).toEqual({
      certFile: pki.server.certFile,
      keyFile: pki.server.keyFile,
      clientCaFile: pki.caFile,
      clientNames: ['caller', 'other'],
    });
  });

  it('names the flag, or the variable it came from, in each refusal', () => {
    const cert = flag('--tls-cert', pki.server.certFile);
    const key = flag('--tls-key', pki.server.keyFile);
    expect(message(() => tlsFilesFromFlags({ clientCa: flag('IDGEN_TLS_CLIENT_CA', pki.caFile) }))).toBe(
      'IDGEN_TLS_CLIENT_CA applies only with --tls-cert and --tls-key',
    );
    expect(message(() => tlsFilesFromFlags({ cert }))).toBe(
      '--tls-cert and --tls-key go together: give both or neither',
    );
    expect(message(() => tlsFilesFromFlags({ cert, key, clientNames: flag('--tls-client-names', 'a') }))).toMatch(
      /^--tls-client-names needs --tls-client-ca/,
    );
    expect(
      message(() =>
        tlsFilesFromFlags({
          cert,
          key,
          clientCa: flag('--tls-client-ca', pki.caFile),
          clientNames: flag('--tls-client-names', ' , '),
        }),
      ),
    ).toBe('--tls-client-names must list at least one name');
    expect(message(() => tlsFilesFromFlags({ cert: flag('IDGEN_TLS_CERT', pki.caFile), key }))).toMatch(
      /^IDGEN_TLS_CERT: /,
    );
    expect(message(() => tlsFilesFromFlags({ cert: flag('--tls-cert', '/nonexistent.pem'), key }))).toBe(
      '--tls-cert: cannot read the TLS certificate "/nonexistent.pem" (ENOENT)',
    );
  });
});
