// readChrony and the time-source check against a stand-in chronyc: each runs a real process (docs/style.md: specs
// that start processes live in test/).
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGuardedMinter, createTimeSourceCheck, readChrony, type TimeSourceLogger } from '../src/index.js';
import { SYNCED, UNSYNCED } from '../src/chrony-lines.test-helper.js';
import { createTestClock } from '../src/testing.js';
import { DEFAULT_TIME_SOURCE_INTERVAL_MS, SPAWN_RETRY_DELAYS_MS } from '../src/time-source.js';

describe('readChrony (real processes)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'idgen-chrony-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** A stand-in `chronyc` that prints `out` and exits with `code`. */
  function fakeChronyc(name: string, out: string, code = 0): string {
    const path = join(dir, name);
    writeFileSync(
      path,
      `#!/bin/sh\n[ "$1 $2" = "-c tracking" ] || { echo "bad args: $*" >&2; exit 9; }\nprintf '%s\\n' '${out}'\nexit ${code}\n`,
    );
    chmodSync(path, 0o755);
    return path;
  }

  it('reads a healthy clock', async () => {
    const r = await readChrony({ chronycPath: fakeChronyc('ok', SYNCED) });
    expect(r).toMatchObject({ healthy: true });
  });

  it('says so when chronyc is missing', async () => {
    const r = await readChrony({ chronycPath: join(dir, 'no-such-chronyc') });
    expect(r.healthy).toBe(false);
    expect(r.problem).toBe('chronyc-missing');
    expect(r.message).toMatch(
      /no-such-chronyc not found: install chrony \(apt-get install chrony\), or run with --time-source none/,
    );
  });

  it('says so when chronyc exits non-zero', async () => {
    const r = await readChrony({ chronycPath: fakeChronyc('fails', '506 Cannot talk to daemon', 1) });
    expect(r.healthy).toBe(false);
    expect(r.problem).toBe('chronyc-failed');
    expect(r.message).toMatch(/failed \(exit code 1\): "506 Cannot talk to daemon"/);
  });

  it('says so when the output cannot be parsed', async () => {
    const r = await readChrony({ chronycPath: fakeChronyc('garbage', 'hello,world') });
    expect(r.healthy).toBe(false);
    expect(r.problem).toBe('unparseable');
    expect(r.message).toMatch(/could not parse .* expected 14 comma-separated fields .*, got 2/);
  });

  /** node's execFile, except that the first `failures` runs fail to start with `code`, as spawn reports it. */
  function failingSpawns(
    failures: number,
    code: string,
  ): { runs: () => number; execFile: NonNullable<Parameters<typeof readChrony>[0]>['execFile'] } {
    let runs = 0;
    return {
      runs: () => runs,
      execFile: (file, args, options, callback) => {
        runs++;
        if (runs <= failures) {
          const e = Object.assign(new Error(`spawn ${file} ${code}`), { code, errno: -24, syscall: `spawn ${file}` });
          setImmediate(() => callback(e, '', ''));
          return undefined;
        }
        return execFile(file, [...args], options, (err, stdout, stderr) => callback(err, stdout, stderr));
      },
    };
  }

  it.each(['EMFILE', 'ENFILE', 'EAGAIN'])(
    'tries again when chronyc could not be started (%s), and reads it',
    async (code) => {
      const spawns = failingSpawns(2, code);
      const r = await readChrony({
        chronycPath: fakeChronyc(`ok-${code}`, SYNCED),
        execFile: spawns.execFile,
        spawnRetryDelaysMs: [10, 10, 10],
      });
      expect(r).toMatchObject({ healthy: true });
      expect(spawns.runs()).toBe(3);
    },
  );

  it('gives up after its retries: unhealthy (chronyc-failed), saying why and how often it tried', async () => {
    const spawns = failingSpawns(Number.POSITIVE_INFINITY, 'EMFILE');
    const r = await readChrony({
      chronycPath: fakeChronyc('never-starts', SYNCED),
      execFile: spawns.execFile,
      spawnRetryDelaysMs: [10, 10],
    });
    expect(r.healthy).toBe(false);
    expect(r.problem).toBe('chronyc-failed');
    expect(r.message).toMatch(/never-starts could not be started: EMFILE .* \(3 attempts\)$/);
    expect(spawns.runs()).toBe(3);
  });

  it('does not retry a chronyc that is missing or fails by itself', async () => {
    const missing = failingSpawns(0, 'EMFILE');
    expect((await readChrony({ chronycPath: join(dir, 'no-such-chronyc'), execFile: missing.execFile })).problem).toBe(
      'chronyc-missing',
    );
    expect(missing.runs()).toBe(1);
    const failing = failingSpawns(0, 'EMFILE');
    expect(
      (await readChrony({ chronycPath: fakeChronyc('fails-once', 'no', 1), execFile: failing.execFile })).problem,
    ).toBe('chronyc-failed');
    expect(failing.runs()).toBe(1);
  });

  it('by default retries within the check interval', () => {
    const total = SPAWN_RETRY_DELAYS_MS.reduce((a, b) => a + b, 0);
    expect(SPAWN_RETRY_DELAYS_MS.length).toBeGreaterThan(0);
    expect(total).toBeLessThan(DEFAULT_TIME_SOURCE_INTERVAL_MS);
  });

  it('fences the guard while unhealthy and lifts the fence when healthy again', async () => {
    const clock = createTestClock();
    const guard = createGuardedMinter({ region: 0, clock, checkIntervalMs: 0 });
    guard.assign({
      region: 0,
      worker: 1,
      floorMs: clock.nowMs() - 1,
      deadlineMonoMs: Number.POSITIVE_INFINITY,
      ceilingMs: Number.POSITIVE_INFINITY,
    });
    const path = join(dir, 'switchable');
    writeFileSync(path, `#!/bin/sh\nprintf '%s\\n' '${UNSYNCED}'\n`);
    chmodSync(path, 0o755);
    const logs: string[] = [];
    const logger: TimeSourceLogger = {
      info: (_o, m) => logs.push(`info ${m}`),
      warn: (_o, m) => logs.push(`warn ${m}`),
      error: (_o, m) => logs.push(`error ${m}`),
    };
    const check = createTimeSourceCheck({ mode: 'chrony', guard, chronycPath: path, logger, intervalMs: 60_000 });
    try {
      const first = await check.start();
      expect(first.healthy).toBe(false);
      expect(guard.status()).toMatchObject({ state: 'fenced', reason: 'time-source' });
      writeFileSync(path, `#!/bin/sh\nprintf '%s\\n' '${SYNCED}'\n`);
      expect((await check.readNow()).healthy).toBe(true);
      expect(guard.status().state).toBe('serving');
      expect(guard.status().timeSource.offsetSeconds).toBeCloseTo(0.000001234, 12);
      expect(logs).toEqual(['error time source unhealthy: minting is fenced', 'info time source healthy']);
    } finally {
      check.stop();
    }
  });

  it('turned off, trusts the clock and says so loudly', async () => {
    const guard = createGuardedMinter({ region: 0, checkIntervalMs: 0 });
    const warnings: string[] = [];
    const check = createTimeSourceCheck({
      mode: 'none',
      guard,
      logger: { info: () => undefined, warn: (_o, m) => warnings.push(m), error: () => undefined },
    });
    const r = await check.start();
    check.stop();
    expect(r.healthy).toBe(true);
    expect(r.message).toMatch(/turned off/);
    expect(warnings.join('\n')).toMatch(/TIME SOURCE CHECK TURNED OFF.*never in production/);
  });
});
