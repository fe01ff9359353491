// The node's log as a pipeline reads it: pino's level names, and a production start (etcd with
// client TLS, serving mTLS, the chrony time source, as the README's production set-up) that logs no warning from
// start to a clean stop. Real etcd, a real node process, certificates made with openssl.
import { delimiter } from 'node:path';
import { CHRONY_HEALTHY, cleanupAll, createChronyStub, makeTestPki, startEtcd, type TestPki } from '@idgen/testing';
import { initRegionSecured, parseLine, startServer } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const REGION = 2;
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

describe('a production start', () => {
  let pki: TestPki;
  let etcdUrl: string;

  beforeAll(async () => {
    pki = makeTestPki({ clients: ['idgen-node', 'idgen-caller'], name: 'logs-pki' });
    etcdUrl = (await startEtcd({ tls: { pki, clientCertAuth: true } })).clientUrl;
    const client = pki.clients['idgen-node'];
    await initRegionSecured(etcdUrl, REGION, { tls: { ca: pki.ca, cert: client?.cert, key: client?.key } });
  });

  it('logs level names and no warning, from start to a clean stop', async () => {
    const client = pki.clients['idgen-node'];
    if (client === undefined) throw new Error('no client certificate');
    const chrony = createChronyStub(CHRONY_HEALTHY);
    const node = await startServer(
      [
        ...['--region', String(REGION), '--node-id', 'logs-node', '--lease-ttl', '4', '--time-source', 'chrony'],
        ...['--etcd', etcdUrl, '--etcd-ca', pki.caFile, '--etcd-cert', client.certFile, '--etcd-key', client.keyFile],
        ...['--tls-cert', pki.server.certFile, '--tls-key', pki.server.keyFile],
        ...['--tls-client-ca', pki.caFile, '--tls-client-names', 'idgen-caller'],
      ],
      { PATH: `${chrony.dir}${delimiter}${process.env['PATH'] ?? ''}` },
    );
    await node.ready(30_000);
    expect((await node.stop()).code).toBe(0);

    const lines = node.process.stdoutLines.map((l) => [l, parseLine(l)] as const);
    // Every stdout line is a pino line with a level name (`"level":"info"`), none a number.
    expect(lines.filter(([, j]) => j === undefined || !LEVELS.includes(String(j.level))).map(([l]) => l)).toEqual([]);
    expect(lines.length).toBeGreaterThan(5);
    expect(lines.map(([, j]) => j?.msg)).toEqual(expect.arrayContaining(['ready', 'stopped']));
    // No warning, error or fatal line on a normal start and stop.
    const notInfo = lines.filter(([, j]) => j?.level !== 'info' && j?.level !== 'debug').map(([l]) => l);
    expect(notInfo).toEqual([]);
    // Nothing on stderr: no DEP0123 for the etcd given by IP (no TLS server name for an IP: @idgen/lease's etcd-tls.ts).
    expect(node.process.stderrLines.filter((l) => l !== '')).toEqual([]);
  });
});
