// The client against a real node serving TLS with mTLS: a CA, a client certificate and a server name
// are all a team needs to give it; a certificate the node does not accept gets the typed error, never an ID.
import { cleanupAll, makeTestPki } from '@idgen/testing';
import type { TestPki } from '@idgen/testing';
import { createIdClient, isIdsUnavailableError } from '../src/index.js';
import { IdLedger, regionOf, startServer, type ServerNode } from './harness.test-helper.js';

jest.setTimeout(60_000);

let pki: TestPki;
let foreign: TestPki;
let server: ServerNode;

beforeAll(async () => {
  pki = makeTestPki({ clients: ['orders-service'], name: 'client-tls' });
  foreign = makeTestPki({ clients: ['orders-service'], name: 'client-tls-foreign' });
  server = await startServer({
    region: 3,
    tls: { certFile: pki.server.certFile, keyFile: pki.server.keyFile, clientCaFile: pki.caFile },
  });
});

afterAll(async () => {
  await server?.process.stop();
  await cleanupAll();
});

it.each(['connect', 'grpc'] as const)('gets IDs over TLS with a client certificate (%s)', async (protocol) => {
  const cert = pki.clients['orders-service'];
  if (cert === undefined) throw new Error('no client certificate');
  const client = createIdClient({
    region: 3,
    nodes: [server.address],
    protocol,
    tls: { ca: pki.ca, cert: cert.cert, key: cert.key, servername: 'localhost' },
  });
  try {
    const ledger = new IdLedger();
    ledger.add(await client.nextId(), ...(await client.nextIds(250)));
    expect(ledger.duplicates).toEqual([]);
    expect(ledger.size).toBe(251);
    expect(regionOf(await client.nextId())).toBe(3);
  } finally {
    await client.close();
  }
});

it('a certificate from another CA gets IdsUnavailableError, never an ID', async () => {
  const cert = foreign.clients['orders-service'];
  if (cert === undefined) throw new Error('no client certificate');
  const client = createIdClient({
    region: 3,
    nodes: [server.address],
    tls: { ca: pki.ca, cert: cert.cert, key: cert.key, servername: 'localhost' },
    deadlineMs: 1_500,
    prefill: false,
  });
  try {
    const outcome = await client.nextId().then(
      (id) => `an ID: ${id}`,
      (e: unknown) => (isIdsUnavailableError(e) ? 'IdsUnavailableError' : `another error: ${String(e)}`),
    );
    expect(outcome).toBe('IdsUnavailableError');
  } finally {
    await client.close();
  }
});

/** What `nextId()` rejects with: the IdsUnavailableError's message and its last attempt's. */
async function unavailableMessage(
  options: Parameters<typeof createIdClient>[0],
): Promise<{ message: string; last: string }> {
  const client = createIdClient({ ...options, deadlineMs: 1_500, prefill: false });
  try {
    const e: unknown = await client.nextId().then(
      (id) => new Error(`an ID: ${id}`),
      (x: unknown) => x,
    );
    if (!isIdsUnavailableError(e)) throw new Error(`not IdsUnavailableError: ${String(e)}`);
    return { message: e.message, last: e.attempts[e.attempts.length - 1]?.message ?? '' };
  } finally {
    await client.close();
  }
}

// Issue 33: `e.message` names the cause, not only a code (`canceled`, `internal`, `unavailable`).
it('IdsUnavailableError.message names the last attempt`s cause: no client certificate, a name the certificate lacks', async () => {
  const noCert = await unavailableMessage({
    region: 3,
    nodes: [server.address],
    tls: { ca: pki.ca, servername: 'localhost' },
  });
  expect(noCert.last).not.toBe('');
  expect(noCert.message).toContain(`; last attempt: ${server.url} `);
  expect(noCert.message).toContain(noCert.last);
  const cert = pki.clients['orders-service'];
  const wrongName = await unavailableMessage({
    region: 3,
    nodes: [server.address],
    tls: { ca: pki.ca, cert: cert?.cert, key: cert?.key, servername: 'idgen.other.test' },
  });
  expect(wrongName.message).toMatch(/last attempt: .*(Hostname|altnames|idgen\.other\.test)/);
});
