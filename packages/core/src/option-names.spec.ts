import { refuseUnknownOptions } from './index.js';

describe('refuseUnknownOptions', () => {
  const known = { endpoints: true, tls: true } as const;

  it('names every unknown option, where it was, and what that place takes, with the hint', () => {
    expect(() => refuseUnknownOptions('createX', '', { endpoint: 'a', tlz: {} }, known)).toThrow(
      new TypeError('createX: unknown options "endpoint", "tlz"; the options are endpoints, tls'),
    );
    expect(() => refuseUnknownOptions('createX', 'etcd', { caFile: 'x' }, known, ' (PEM text)')).toThrow(
      new TypeError('createX: unknown option "caFile" in etcd; etcd takes endpoints, tls (PEM text)'),
    );
  });

  it('counts an option set to undefined as absent, and leaves non-objects to the type checks', () => {
    expect(() => refuseUnknownOptions('createX', '', { endpoints: [], other: undefined }, known)).not.toThrow();
    for (const given of [undefined, null, 'text', 3, ['a']])
      expect(() => refuseUnknownOptions('createX', '', given, known)).not.toThrow();
  });
});
