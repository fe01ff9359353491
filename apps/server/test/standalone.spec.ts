// The built server as a process, with no etcd: configuration errors, `npm start`'s command, shutdown.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import { CHRONY_HEALTHY, CHRONY_UNSYNCHRONISED, cleanupAll, createChronyStub, freePort } from '@idgen/testing';
import {
  decode,
  idClient,
  idsOf,
  parseLine,
  spawnServer,
  standaloneStateFile,
  startServer,
  waitFor,
} from './support.test-helper.js';

jest.setTimeout(90_000);

/** Where Debian's libfaketime puts the preload library; missing: fail and say what to install. */
function libfaketime(): string {
  const listed = spawnSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8' });
  const path = (listed.stdout ?? '').split('\n').find((l) => l.endsWith('/libfaketime.so.1'));
  if (path === undefined)
    throw new Error("libfaketime.so.1 not found: install Debian's faketime package (apt-get install faketime)");
  return path;
}
afterAll(() => cleanupAll());

describe('configuration errors (docs/design.md §5 step 1)', () => {
  it.each([
    [['--standalone', '--region', '9'], {}, /^idgen-server: --region must be an integer from 0 to 7, got "9"/],
    [['--standalone', '--time-source', 'sundial'], {}, /^idgen-server: --time-source must be one of chrony, none/],
    [['--etcd', 'http://127.0.0.1:2379'], {}, /^idgen-server: --region is required with --etcd/],
    // Standalone only by name: no etcd and no --standalone is a production manifest missing IDGEN_ETCD.
    [['--time-source', 'none'], {}, /^idgen-server: give --etcd <urls> \(production\) or --standalone/],
    [
      ['--standalone', '--etcd', 'http://127.0.0.1:2379', '--region', '1'],
      {},
      /^idgen-server: give either --etcd or --standalone, not both/,
    ],
    [['--time-source', 'none'], { IDGEN_STANDALONE: 'yes' }, /^idgen-server: IDGEN_STANDALONE must be 1 or 0/],
    [
      ['--time-source', 'none'],
      { IDGEN_STANDALONE: '0' },
      /^idgen-server: give --etcd <urls> \(production\) or --standalone/,
    ],
    [
      ['--etcd', 'http://127.0.0.1:2379', '--region', '1', '--state-file', '/tmp/x'],
      {},
      /^idgen-server: --state-file applies only with --standalone/,
    ],
    [['--unknown-flag'], {}, /^idgen-server: unknown option '--unknown-flag'/],
    [
      ['--standalone'],
      { IDGEN_MAX_COUNT: '0' },
      /^idgen-server: IDGEN_MAX_COUNT must be an integer from 1 to 65536, got "0"/,
    ],
    [['--standalone'], { IDGEN_LISTEN: 'nowhere' }, /^idgen-server: IDGEN_LISTEN must be host:port/],
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
    for (const flag of [
      '--region',
      '--etcd',
      '--standalone',
      '--state-file',
      '--etcd-prefix',
      '--listen',
      '--advertise',
      '--metrics-listen',
      '--workers',
      '--lease-ttl',
      '--time-source',
      '--max-count',
      '--node-id',
    ]) {
      expect(help).toContain(flag);
    }
    expect(help).toContain('[IDGEN_LISTEN] (default: "127.0.0.1:8080")');
    expect(proc.stderrLines).toEqual([]);
  });
});

describe("standalone mode (`npm start`'s command: --standalone --time-source none, no etcd)", () => {
  it('serves IDs on the configured port, says loudly it is single-node, and stops cleanly on SIGTERM', async () => {
    const port = await freePort();
    const metricsPort = await freePort();
    // Exactly `npm start`'s arguments; the ports come from the environment (every flag has a variable).
    const node = await startServer(['--standalone', '--time-source', 'none'], {
      IDGEN_STATE_FILE: standaloneStateFile(),
      IDGEN_LISTEN: `127.0.0.1:${port}`,
      IDGEN_METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
      IDGEN_REGION: '3',
    });
    expect(node.port).toBe(port);
    const ready = await node.ready();
    expect(ready).toMatchObject({ region: 3, worker: 0, mode: 'standalone', listen: `127.0.0.1:${port}` });
    expect(typeof ready['bootMs']).toBe('number');
    const warning = node.logs().find((l) => String(l.msg).startsWith('STANDALONE MODE'));
    expect(warning?.level).toBe('warn');

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
    expect(metrics).toMatch(
      /idgen_server_requests_total\{[^}]*rpc_method="NextIds"[^}]*rpc_response_status_code="ok"[^}]*\} 1/,
    );
    expect(metrics).toMatch(/idgen_ids_minted_total\{[^}]*\} 3/);

    const exit = await node.stop();
    expect(exit).toEqual({ code: 0, signal: null });
    const stopped = node.logs().find((l) => l.msg === 'stopped');
    expect(stopped).toMatchObject({ signal: 'SIGTERM', released: true });
  });

  it('exits 1 with the reason logged when its port is taken', async () => {
    const first = await startServer(['--time-source', 'none', '--metrics-listen', 'off']);
    await first.ready();
    const second = spawnServer([
      '--standalone',
      '--state-file',
      standaloneStateFile(),
      '--time-source',
      'none',
      '--metrics-listen',
      'off',
      '--listen',
      `127.0.0.1:${first.port}`,
    ]);
    expect((await second.exited).code).toBe(1);
    const fatal = second.stdoutLines.map(parseLine).find((l) => l?.level === 'fatal');
    expect(String(fatal?.msg)).toContain(`cannot listen on 127.0.0.1:${first.port}`);
    expect((await first.stop()).code).toBe(0);
  });
});

describe('standalone state file (issue 12: a restart or a second node cannot repeat an ID)', () => {
  it('a second standalone node on the same state file refuses to start', async () => {
    const stateFile = standaloneStateFile();
    const first = await startServer(['--time-source', 'none', '--metrics-listen', 'off', '--state-file', stateFile]);
    await first.ready();
    const second = spawnServer([
      '--standalone',
      '--state-file',
      stateFile,
      '--time-source',
      'none',
      '--metrics-listen',
      'off',
      '--listen',
      '127.0.0.1:0',
    ]);
    expect((await second.exited).code).toBe(1);
    const fatal = second.stdoutLines.map(parseLine).find((l) => l?.level === 'fatal');
    expect(JSON.stringify(fatal)).toContain('another standalone node holds');
    expect((await first.stop()).code).toBe(0);
  });

  it('a restart with the wall clock stepped back 2 s (libfaketime) mints nothing at or below the previous run', async () => {
    const stateFile = standaloneStateFile();
    const clockFile = join(dirname(stateFile), 'faketime');
    writeFileSync(clockFile, '+0\n');
    const env = {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: clockFile,
      FAKETIME_NO_CACHE: '1',
      DONT_FAKE_MONOTONIC: '1',
    };
    const args = ['--time-source', 'none', '--metrics-listen', 'off', '--state-file', stateFile];
    const mintAll = async (node: Awaited<ReturnType<typeof startServer>>): Promise<bigint[]> => {
      const client = idClient(node.baseUrl, 'grpc-h2');
      const ids: bigint[] = [];
      for (let i = 0; i < 20; i++) ids.push(...idsOf((await client.nextIds({ count: 500 })).blocks));
      return ids;
    };
    for (const crash of [false, true]) {
      const first = await startServer(args, env);
      await first.ready();
      const before = await mintAll(first);
      if (crash)
        await first.process.kill(); // SIGKILL: no release, the lock left behind goes stale
      else expect((await first.stop()).code).toBe(0);
      writeFileSync(clockFile, '-2s\n'); // the next run's wall clock reads 2 s earlier
      const second = await startServer(args, env);
      await second.ready(20_000);
      // It refuses (waiting-for-floor) until its clock passes what the first run may have minted.
      await waitFor(
        'the restarted node to pass its floor',
        async () => (await fetch(`${second.baseUrl}/readyz`)).status === 200,
        20_000,
      );
      const after = await mintAll(second);
      const highest = before.reduce((a, b) => (a > b ? a : b));
      expect(after.filter((id) => id <= highest)).toEqual([]);
      expect((await second.stop()).code).toBe(0);
      writeFileSync(clockFile, '+0\n');
    }
  });
});

describe('the time source (--time-source chrony, the default)', () => {
  it('is not ready on an unsynchronised clock, fences when it loses sync while running, and recovers', async () => {
    const chrony = createChronyStub(CHRONY_UNSYNCHRONISED);
    const node = await startServer(['--metrics-listen', 'off'], {
      PATH: `${chrony.dir}${delimiter}${process.env['PATH'] ?? ''}`,
    });
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
