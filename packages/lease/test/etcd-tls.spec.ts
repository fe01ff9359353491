// TLS to an etcd given by IP address: no TLS server name for an IP (grpc-js sent the IP, Node 24's
// DEP0123 on every start), while the certificate is still checked against the address: a real etcd with client
// TLS, certificates made with openssl, and a loopback relay on an address the certificate does not name.
import { createServer, connect, type Server } from 'node:net';
import { join } from 'node:path';
import { cleanupAll, makeTestPki, spawnProcess, startEtcd, type TestPki } from '@idgen/testing';
import { createEtcdClient } from '../src/etcd-client.js';

jest.setTimeout(60_000);

let pki: TestPki;
let url: URL;
let relay: Server;

beforeAll(async () => {
  pki = makeTestPki({ clients: ['idgen-node'], name: 'etcd-tls-pki' });
  url = new URL((await startEtcd({ tls: { pki, clientCertAuth: true } })).clientUrl);
  // 127.0.0.2 reaches the same etcd, but its certificate names only IP:127.0.0.1 and DNS:localhost.
  relay = createServer((s) => {
    const upstream = connect(Number(url.port), '127.0.0.1');
    s.pipe(upstream).pipe(s);
    s.on('error', () => upstream.destroy());
    upstream.on('error', () => s.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.2', () => r()));
});

afterAll(async () => {
  await new Promise<void>((r) => relay.close(() => r()));
  await cleanupAll();
});

function clientFor(endpoint: string) {
  const c = pki.clients['idgen-node'];
  return createEtcdClient({ endpoints: [endpoint], tls: { ca: pki.ca, cert: c?.cert, key: c?.key }, auth: undefined });
}

describe('TLS to etcd', () => {
  it('given by IP: reads and writes, and a process using it prints no warning (no DEP0123)', async () => {
    const client = clientFor(`https://127.0.0.1:${url.port}`);
    try {
      await client.put('/tls-check').value('by-ip');
      expect(await client.get('/tls-check').string()).toBe('by-ip');
    } finally {
      client.close();
    }
    // Node prints a process's deprecation warnings on its stderr: a process of its own, on the built package.
    const c = pki.clients['idgen-node'];
    const script = `
      const { createEtcdClient } = require(${JSON.stringify(join(__dirname, '..', 'dist', 'cjs', 'index.js'))});
      const fs = require('node:fs');
      const client = createEtcdClient({ endpoints: ['https://127.0.0.1:${url.port}'], auth: undefined,
        tls: { ca: fs.readFileSync(${JSON.stringify(pki.caFile)}, 'utf8'), cert: fs.readFileSync(${JSON.stringify(c?.certFile)}, 'utf8'), key: fs.readFileSync(${JSON.stringify(c?.keyFile)}, 'utf8') } });
      client.get('/tls-check').string().then((v) => { console.log('read ' + v); client.close(); }, (e) => { console.log('failed ' + e.message); client.close(); process.exitCode = 1; });`;
    const proc = spawnProcess(process.execPath, ['-e', script]);
    const exit = await proc.exited;
    expect([exit.code, proc.stdoutLines]).toEqual([0, ['read by-ip']]);
    expect(proc.stderrLines.filter((l) => l !== '')).toEqual([]);
  });

  it('given by name: works, the name checked against the certificate', async () => {
    const client = clientFor(`https://localhost:${url.port}`);
    try {
      expect(await client.get('/tls-check').string()).toBe('by-ip');
    } finally {
      client.close();
    }
  });

  it('given by an IP the certificate does not name: refused (the IP SAN is still checked)', async () => {
    const port = (relay.address() as { port: number }).port;
    const client = clientFor(`https://127.0.0.2:${port}`);
    try {
      await expect(client.get('/tls-check').string()).rejects.toThrow(/IP: 127\.0\.0\.2 is not in the cert's list/);
    } finally {
      client.close();
    }
  });
});
