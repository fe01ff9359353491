// Options the client does not know are refused at once with a TypeError naming them and the names it takes
// (issue 33): a misspelt option must not be ignored without a word.
import { createIdClient, type IdClientOptions } from './index.js';

const create = (options: unknown) => () => createIdClient(options as IdClientOptions);
const base = { region: 0, nodes: ['http://127.0.0.1:1'], prefill: false };

describe('createIdClient refuses unknown options', () => {
  it('a misspelt top-level option', () => {
    expect(create({ ...base, node: ['http://127.0.0.1:2'] })).toThrow(
      /^createIdClient: unknown option "node"; the options are region, nodes, discovery, fallbackRegions, .*random, keyedFormKey$/,
    );
    expect(create({ ...base, node: ['x'] })).toThrow(TypeError);
  });

  it('unknown names in tls, keepAlive, backoff, hedge and fallbackRegions[]', () => {
    expect(create({ ...base, tls: { caFile: '/etc/ca.crt' } })).toThrow(
      'createIdClient: unknown option "caFile" in tls; tls takes ca, cert, key, servername, rejectUnauthorized',
    );
    expect(create({ ...base, keepAlive: { interval: 5 } })).toThrow(
      'createIdClient: unknown option "interval" in keepAlive; keepAlive takes intervalMs, timeoutMs, idleConnections',
    );
    expect(create({ ...base, backoff: { initialMs: 5, max: 9 } })).toThrow(
      'createIdClient: unknown option "max" in backoff; backoff takes initialMs, maxMs',
    );
    expect(create({ ...base, hedge: { min: 1 } })).toThrow(
      'createIdClient: unknown option "min" in hedge; hedge takes minMs, maxMs, latencyMultiple',
    );
    expect(create({ ...base, fallbackRegions: [{ region: 1, node: ['x'] }] })).toThrow(
      'createIdClient: unknown option "node" in fallbackRegions[]; fallbackRegions[] takes region, nodes, discovery',
    );
  });

  it('known options and options set to undefined pass', async () => {
    let client: ReturnType<typeof createIdClient> | undefined;
    expect(() => {
      client = createIdClient({ ...base, tls: undefined, keepAlive: { intervalMs: 0 }, ...{ other: undefined } });
    }).not.toThrow();
    await client?.close();
  });
});
