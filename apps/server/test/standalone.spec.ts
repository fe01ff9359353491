// The built server as a process, with no etcd: configuration errors, `npm start`'s command, shutdown.
import { delimiter } from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import { cleanupAll, freePort } from '@idgen/testing';
import { CHRONY_HEALTHY, CHRONY_UNSYNCHRONISED, createChronyStub } from './chrony-stub.js';
import { decode, idClient, idsOf, parseLine, spawnServer, startServer, waitFor } from './support.js';

jest.setTimeout(60_000);
afterAll(() => cleanupAll());

describe('configuration errors (DESIGN §5 step 1)', () => {
  it.each([
    [['--region', '9'], {}, /^idgen-server: --region must be an integer from 0 to 7, got "9"/],
    [['--time-source', 'sundial'], {}, /^idgen-server: --time-source must be chrony or none/],
    [['--etcd', 'http://127.0.0.1:2379'], {}, /^idgen-server: --region is required with --etcd/],
    [['--unknown-flag'], {}, /^idgen-server: unknown option '--unknown-flag'/],
    [[], { IDGEN_MAX_COUNT: '0' }, /^idgen-server: IDGEN_MAX_COUNT must be an integer from 1 to 65536, got "0"/],
    [[], { IDGEN_LISTEN: 'nowhere' }, /^idgen-server: IDGEN_LISTEN must be host:port/],
  ])('%j %j: one line on stderr, nothing on stdout, exit 2', async (args, env, message) => {
    const proc = spawnServer(args, env);
    const exit = await proc.exited;
    expect(exit).toEqual({ code: 2, signal: null });
    expect(proc.stdoutLines).toEqual([]);
    expect(proc.stderrLines).toHaveLength(1);
    expect(proc.stderrLines[0]).toMatch(message);
    expect(proc.stderrLines[0]).not.toMatch(/\n| {4}at /);
  });

  it('--help lists every flag with its variable and default, exit 0', async () => {
    const proc = spawnServer(['--help']);
    expect(await proc.exited).toEqual({ code: 0, signal: null });
    const help = proc.stdoutLines.join('\n');
    for (const flag of ['--region', '--etcd', '--etcd-prefix', '--listen', '--advertise', '--metrics-listen', '--workers', '--lease-ttl', '--time-source', '--max-count', '--node-id']) {
      expect(help).toContain(flag);
    }
    expect(help).toContain('[IDGEN_LISTEN] (default: "127.0.0.1:8080")');
    expect(proc.stderrLines).toEqual([]);
  });
});

describe("standalone mode (`npm start`'s command: --time-source none, no etcd)", () => {
  it('serves IDs on the configured port, says loudly it is single-node, and stops cleanly on SIGTERM', async () => {
    const port = await freePort();
    const metricsPort = await freePort();
    // Exactly `npm start`'s arguments; the ports come from the environment (every flag has a variable).
    const node = await startServer(['--time-source', 'none'], {
      IDGEN_LISTEN: `127.0.0.1:${port}`,
      IDGEN_METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
      IDGEN_REGION: '3',
    });
    expect(node.port).toBe(port);
    const ready = await node.ready();
    expect(ready).toMatchObject({ region: 3, worker: 0, mode: 'standalone', listen: `127.0.0.1:${port}` });
    expect(typeof ready['bootMs']).toBe('number');
    const warning = node.logs().find((l) => String(l.msg).startsWith('STANDALONE MODE'));
    expect(warning?.level).toBe(40);

    // The README's curl line, as fetch: Connect JSON over HTTP/1.1.
    const res = await fetch(`${node.baseUrl}/idgen.v1.IdGenerator/NextIds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"count":3}',
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { blocks: { first: string; count: number }[] };
    const ids = idsOf(body.blocks.map((b) => ({ first: BigInt(b.first), count: b.count })));
    expect(ids).toHaveLength(3);
    for (const id of ids) expect(decode(id)).toMatchObject({ region: 3, worker: 0 });

    const status = await idClient(node.baseUrl, 'connect-json-http1').getStatus({});
    expect(status).toMatchObject({ region: 3, worker: 0, maxCount: 4096, advertiseAddress: `127.0.0.1:${port}` });

    expect((await fetch(`${node.baseUrl}/readyz`)).status).toBe(200);
    expect((await fetch(`${node.baseUrl}/healthz`)).status).toBe(200);
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/idgen_server_requests_total\{[^}]*rpc_method="NextIds"[^}]*rpc_response_status_code="ok"[^}]*\} 1/);
    expect(metrics).toMatch(/idgen_ids_minted_total\{[^}]*\} 3/);

    const exit = await node.stop();
    expect(exit).toEqual({ code: 0, signal: null });
    const stopped = node.logs().find((l) => l.msg === 'stopped');
    expect(stopped).toMatchObject({ signal: 'SIGTERM', released: true });
  });

  it('exits 1 with the reason logged when its port is taken', async () => {
    const first = await startServer(['--time-source', 'none', '--metrics-listen', 'off']);
    await first.ready();
    const second = spawnServer(['--time-source', 'none', '--metrics-listen', 'off', '--listen', `127.0.0.1:${first.port}`]);
    expect((await second.exited).code).toBe(1);
    const fatal = second.stdoutLines.map(parseLine).find((l) => l?.level === 60);
    expect(String(fatal?.msg)).toContain(`cannot listen on 127.0.0.1:${first.port}`);
    expect((await first.stop()).code).toBe(0);
  });
});

describe('the time source (--time-source chrony, the default)', () => {
  it('is not ready on an unsynchronised clock, fences when it loses sync while running, and recovers', async () => {
    const chrony = createChronyStub(CHRONY_UNSYNCHRONISED);
    const node = await startServer(['--metrics-listen', 'off'], { PATH: `${chrony.dir}${delimiter}${process.env['PATH'] ?? ''}` });
    const client = idClient(node.baseUrl, 'connect-json-http1');
    const refusal = async (): Promise<string | undefined> =>
      client.nextIds({ count: 1 }).then(
        () => undefined,
        (e: unknown) => {
          const error = ConnectError.from(e);
          expect(error.code).toBe(Code.Unavailable);
          return error.metadata.get('idgen-fence-reason') ?? '';
        },
      );

    await node.process.waitForLine(/time source unhealthy/, 10_000);
    expect((await fetch(`${node.baseUrl}/readyz`)).status).toBe(503);
    expect(await refusal()).toBeDefined();

    chrony.say(CHRONY_HEALTHY);
    await node.ready(15_000);
    expect(idsOf((await client.nextIds({ count: 2 })).blocks)).toHaveLength(2);

    // Losing sync while serving fences minting (checked every 5 s) until it comes back.
    chrony.say(CHRONY_UNSYNCHRONISED);
    await waitFor('the node to fence on the time source', async () => (await refusal()) === 'time-source', 20_000);
    expect((await fetch(`${node.baseUrl}/readyz`)).status).toBe(503);
    chrony.say(CHRONY_HEALTHY);
    await waitFor('the node to serve again', async () => (await refusal()) === undefined, 20_000);
    expect((await node.stop()).code).toBe(0);
  });
});
