import { Resolver } from 'node:dns/promises';
import { startDnsServer, type TestDnsServer } from './dns-server.js';
import { cleanupAll, liveCount } from './registry.js';

jest.setTimeout(30_000);

let dns: TestDnsServer;

/** A real resolver (node:dns, c-ares) pointed at the test's server only, with a short deadline. */
function resolver(): Resolver {
  const r = new Resolver({ timeout: 300, tries: 1 });
  r.setServers([dns.address]);
  return r;
}

/** The error code a lookup rejects with (`ENOTFOUND`, `ESERVFAIL`, …). */
async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return String((e as { code?: unknown }).code);
  }
  throw new Error('expected the lookup to fail');
}

beforeAll(async () => {
  dns = await startDnsServer();
});

afterAll(async () => {
  await cleanupAll();
});

it('answers A and AAAA with the records set, and follows changes', async () => {
  dns.set('idgen-server.test', ['127.0.0.2', '127.0.0.3', '::1', 'fd00::1:2']);
  const r = resolver();
  expect((await r.resolve4('idgen-server.test')).sort()).toEqual(['127.0.0.2', '127.0.0.3']);
  expect((await r.resolve6('IDGEN-server.test')).sort()).toEqual(['::1', 'fd00::1:2']);
  dns.set('idgen-server.test', ['127.0.0.3']);
  expect(await r.resolve4('idgen-server.test')).toEqual(['127.0.0.3']);
  expect(await codeOf(r.resolve6('idgen-server.test'))).toBe('ENODATA');
  expect(dns.queries('idgen-server.test')).toBe(4);
});

it('answers NXDOMAIN for a name it does not know or no longer knows', async () => {
  const r = resolver();
  expect(await codeOf(r.resolve4('nobody.test'))).toBe('ENOTFOUND');
  dns.set('gone.test', ['127.0.0.9']);
  expect(await r.resolve4('gone.test')).toEqual(['127.0.0.9']);
  dns.remove('gone.test');
  expect(await codeOf(r.resolve4('gone.test'))).toBe('ENOTFOUND');
});

it('fails on demand: SERVFAIL, or silence that only the resolver deadline ends', async () => {
  dns.set('flaky.test', ['127.0.0.4']);
  const r = resolver();
  dns.fail('servfail');
  expect(await codeOf(r.resolve4('flaky.test'))).toBe('ESERVFAIL');
  dns.fail('silent');
  const started = Date.now();
  expect(await codeOf(r.resolve4('flaky.test'))).toBe('ETIMEOUT');
  expect(Date.now() - started).toBeLessThan(5000);
  dns.fail(undefined);
  expect(await r.resolve4('flaky.test')).toEqual(['127.0.0.4']);
});

it('rejects records that are not IP addresses', () => {
  expect(() => dns.set('bad.test', ['10.0.0.300'])).toThrow(/not an IP address/);
});

it('close() is idempotent and untracks the server', async () => {
  const other = await startDnsServer();
  const before = liveCount();
  await other.close();
  await other.close();
  expect(liveCount()).toBe(before - 1);
});
