import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import {
  cleanupAll,
  freePort,
  makeTestPki,
  spawnProcess,
  startEtcd,
  tsNodeArgs,
  type EtcdServer,
  type ProcessHandle,
} from '@idgen/testing';

// Issue 22, problem 3: "a team's process using @idgen/discovery may not exit". A child process (a team's app:
// fixtures/discovery-close.child.ts) watches region 2 through @idgen/discovery and uses @idgen/client; etcd then
// hangs (a paused real etcd, over http and https, or a port that accepts and never answers); the child makes a call,
// closes everything and must end by itself. The measured close() and close-to-exit times are reported (console.log),
// asserted only against a generous deadline (no timing assumptions); the bar is an exit within 2 s of close().
jest.setTimeout(120_000);

const CHILD = join(__dirname, 'fixtures', 'discovery-close.child.ts');
/** Generous: a hang is what fails, not a slow machine. */
const EXIT_DEADLINE_MS = 20_000;

afterAll(async () => {
  await cleanupAll();
});

interface Run {
  readonly error: string;
  readonly closeMs: number;
  readonly exitMs: number;
  readonly code: number | null;
}

/** Runs the child against `etcdUrl`; `hang()` makes etcd hang after the child is watching. */
async function runChild(env: NodeJS.ProcessEnv, hang: () => void): Promise<Run> {
  const child: ProcessHandle = spawnProcess(process.execPath, tsNodeArgs(CHILD), { env: { ...process.env, ...env } });
  try {
    await child.waitForLine(/"phase":"watching"/, 30_000);
    hang();
    child.signal('SIGUSR2');
    const failed = JSON.parse(await child.waitForLine(/"phase":"failed"/, 30_000)) as { error: string };
    await child.waitForLine(/"phase":"closing"/, 10_000);
    const closingAt = performance.now();
    const closed = JSON.parse(await child.waitForLine(/"phase":"closed"/, EXIT_DEADLINE_MS)) as { closeMs: number };
    let timer: NodeJS.Timeout | undefined;
    const exit = await Promise.race([
      child.exited,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), EXIT_DEADLINE_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    if (exit === undefined)
      throw new Error(`the child did not exit within ${EXIT_DEADLINE_MS} ms of close():\n${child.tail(20)}`);
    return {
      error: failed.error,
      closeMs: closed.closeMs,
      exitMs: Math.round(performance.now() - closingAt),
      code: exit.code,
    };
  } finally {
    if (child.exitStatus() === undefined) await child.kill();
  }
}

function report(what: string, run: Run): void {
  console.log(`${what}: close() took ${run.closeMs} ms; the process exited ${run.exitMs} ms after close() began`);
}

describe('a process using @idgen/discovery exits after close(), whatever etcd does', () => {
  let etcd: EtcdServer;
  afterEach(async () => {
    etcd?.resume();
    await etcd?.stop();
  });

  it('a paused (SIGSTOP) real etcd over http://', async () => {
    etcd = await startEtcd();
    const run = await runChild({ ETCD_URL: etcd.clientUrl }, () => etcd.pause());
    report('paused etcd, http', run);
    expect(run.code).toBe(0);
    // The call failed because of etcd, and the error says so (not only "region 2: no nodes known").
    expect(run.error).toMatch(/region 2: no nodes known; discovery: etcd http:\/\/127\.0\.0\.1:\d+ has not answered/);
  });

  it('a paused (SIGSTOP) real etcd over https://', async () => {
    const pki = makeTestPki({ name: 'discovery-close', clients: ['app'] });
    etcd = await startEtcd({ tls: { pki } });
    const app = pki.clients['app'];
    const env = {
      ETCD_URL: etcd.clientUrl,
      ETCD_CA_FILE: pki.caFile,
      ETCD_CERT_FILE: app?.certFile,
      ETCD_KEY_FILE: app?.keyFile,
    };
    const run = await runChild(env, () => etcd.pause());
    report('paused etcd, https', run);
    expect(run.code).toBe(0);
    expect(run.error).toMatch(/discovery: etcd https:\/\/127\.0\.0\.1:\d+ has not answered/);
  });
});

describe('a port that accepts and never answers', () => {
  let silent: Server;
  const sockets = new Set<Socket>();
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => silent?.close(() => resolve()));
  });

  it.each([['http'], ['https']])('over %s:// the process exits after close()', async (scheme) => {
    if (silent === undefined) {
      const port = await freePort();
      silent = createServer((socket) => {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
      });
      await new Promise<void>((resolve) => silent.listen(port, '127.0.0.1', () => resolve()));
    }
    const port = (silent.address() as { port: number }).port;
    const pki = scheme === 'https' ? makeTestPki({ name: 'discovery-silent' }) : undefined;
    const run = await runChild(
      {
        ETCD_URL: `${scheme}://127.0.0.1:${port}`,
        WATCH_EXPECTED: '0',
        ...(pki === undefined ? {} : { ETCD_CA_FILE: pki.caFile }),
      },
      () => undefined,
    );
    report(`silent port, ${scheme}`, run);
    expect(run.code).toBe(0);
    expect(run.error).toMatch(new RegExp(`discovery: etcd ${scheme}://127\\.0\\.0\\.1:${port} has not answered`));
  });
});
