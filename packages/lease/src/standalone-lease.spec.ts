import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { createTestClock } from '@idgen/clock-guard/testing';
import { cleanupAll, tempDirSync } from '@idgen/testing';
import { LeaseConfigError, isLeaseError } from './errors.js';
import { RecordingTarget } from './recording-target.test-helper.js';
import { nodeStandaloneIo } from './standalone-io.js';
import type { StandaloneIo } from './standalone-io.js';
import {
  STANDALONE_STATE_MARGIN_MS,
  STANDALONE_STATE_TTL_MS,
  StandaloneLease,
  createStandaloneLease,
  defaultStandaloneStateFile,
} from './standalone-lease.js';
import type { StandaloneLeaseOptions } from './standalone-lease.js';
import { thisHolder } from './state-file-lock.js';
import type { LockHolder } from './state-file-lock.js';
import type { LeaseSnapshot, WorkerLease } from './types.js';

const T = 1_800_000_000_000;
/** Minting stops this long after the lock was last proven held: 5 s − a 1.5 s margin. */
const PROOF_WINDOW = 3_500;
const leases: WorkerLease[] = [];

afterEach(async () => {
  await Promise.all(leases.splice(0).map((l) => l.release()));
});
afterAll(() => cleanupAll());

function stateFile(): string {
  return join(tempDirSync('standalone').path, 'state.json');
}

function open(
  file: string,
  clock = createTestClock(T),
  target = new RecordingTarget('t'),
  lockWaitMs = 0,
  extra: Partial<StandaloneLeaseOptions> = {},
  io?: StandaloneIo,
) {
  const options = { region: 3, workers: '5-9', clock, nodeId: 'solo', stateFile: file, lockWaitMs, ...extra };
  const lease = io === undefined ? createStandaloneLease(options, target) : new StandaloneLease(options, target, io);
  leases.push(lease);
  return { lease, target, clock };
}

async function refusal(p: Promise<unknown>): Promise<string> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(isLeaseError(e) && e.code === 'state-file').toBe(true);
  return (e as Error).message;
}

/** Writes generation `gen` of `file`'s lock as another process would have, with `overrides`. */
function lockOf(file: string, gen: number, overrides: Partial<LockHolder>): void {
  const holder = { ...thisHolder('other', '2026-12-01T20:01:02.345Z', 'cafe'), ...overrides };
  writeFileSync(`${file}.lock.${gen}`, JSON.stringify(holder));
}

/** A pid no process has: a child that has exited. */
function deadPid(): number {
  const done = spawnSync(process.execPath, ['-e', '']);
  if (done.pid === undefined) throw new Error('could not run a child process');
  return done.pid;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(what: string, pred: () => boolean, timeoutMs = 10_000): Promise<void> {
  for (const end = Date.now() + timeoutMs; !pred(); await sleep(5)) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
  }
}

describe('createStandaloneLease (one node only, asked for by name)', () => {
  it('assigns the first worker of the range above a new state file, with a wall ceiling and a deadline; release unassigns', async () => {
    const file = stateFile();
    const { lease, target } = open(file);
    const states: string[] = [];
    lease.on('state', (s) => states.push(s.state));
    await lease.start();
    expect(target.assignment).toEqual({
      region: 3,
      worker: 5,
      floorMs: 1_704_067_199_999, // never used: nothing below the epoch
      deadlineMonoMs: 1_000 + PROOF_WINDOW, // the test clock's monotonic 1000 when the lock was proven
      ceilingMs: T + STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS,
    });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ ms: T, released: false, nodeId: 'solo' });
    expect(lease.snapshot()).toMatchObject({
      state: 'alive',
      mode: 'standalone',
      region: 3,
      worker: 5,
      nodeId: 'solo',
      deadlineInMs: PROOF_WINDOW,
    });
    expect(lease.snapshot().message).toMatch(/one node only/);
    await lease.register();
    await lease.release();
    await lease.release();
    expect(target.of('unassign')).toHaveLength(1);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ ms: T, released: true });
    expect(states).toEqual(['alive', 'released']);
    await expect(lease.start()).rejects.toThrow(/released/);
  });

  it('a second node on the same state file refuses to start, and starts once the first released it', async () => {
    const file = stateFile();
    await open(file).lease.start();
    const second = open(file);
    const refused = await refusal(second.lease.start());
    expect(refused).toMatch(
      new RegExp(
        `^another standalone node holds .*state\\.json: pid ${process.pid} \\(node solo\\) since .*, still running`,
      ),
    );
    expect(second.target.assignment).toBeUndefined();
    await leases[0]?.release();
    await second.lease.start();
    expect(second.target.assignment?.worker).toBe(5);
    expect(
      readdirSync(dirname(file))
        .filter((n) => n.includes('.lock'))
        .sort(),
    ).toEqual(['state.json.lock.2']);
  });

  it('after a crash, a restart mints only above last written + TTL + clock bound, even with the clock stepped back', async () => {
    const file = stateFile();
    // What a SIGKILLed node leaves: its last state (ms T, not released) and its lock, naming a pid now gone.
    writeFileSync(
      file,
      JSON.stringify({ ms: T, released: false, nodeId: 'solo', at: '', ttlMs: STANDALONE_STATE_TTL_MS }),
    );
    lockOf(file, 1, { pid: deadPid() });
    const clock = createTestClock(T - 2_000); // and the clock was stepped back 2 s meanwhile
    const { lease, target } = open(file, clock);
    await lease.start();
    expect(target.assignment?.floorMs).toBe(T + STANDALONE_STATE_TTL_MS + 10);
  });

  it('after a clean release, a restart starts right above the released millisecond', async () => {
    const file = stateFile();
    const clock = createTestClock(T);
    const first = open(file, clock);
    await first.lease.start();
    first.target.lastMinted = T + 700;
    await first.lease.release();
    clock.setWall(T - 2_000);
    const again = open(file, clock);
    await again.lease.start();
    expect(again.target.assignment?.floorMs).toBe(T + 700);
  });

  it('validates before anything', () => {
    const stateFile = '/tmp/never-written';
    expect(() => createStandaloneLease({ region: 8, stateFile }, new RecordingTarget('t'))).toThrow(LeaseConfigError);
    expect(() => createStandaloneLease({ region: 1, workers: '7-3', stateFile }, new RecordingTarget('t'))).toThrow(
      /workers must be a range/,
    );
    expect(() => createStandaloneLease({ region: 1, stateFile: '' }, new RecordingTarget('t'))).toThrow(
      /stateFile must be a file path/,
    );
    expect(() =>
      createStandaloneLease({ region: 1, stateFile, stateIntervalMs: 2_000 }, new RecordingTarget('t')),
    ).toThrow(/stateIntervalMs must be an integer from 1 to 1999/);
    expect(existsSync(stateFile)).toBe(false);
  });
});

describe('a state file that cannot be trusted is refused (issue 21)', () => {
  const howToStartFresh =
    /To start fresh on purpose: freshState \(idgen-server --fresh-state; it mints above the state directory.s last change \+ 3 s\), or delete \S+state\.json and \S+state\.json\.created$/;

  it('refuses a garbled state file rather than guess a floor', async () => {
    const file = stateFile();
    writeFileSync(file, '{"ms": "soon"}');
    const refused = await refusal(open(file).lease.start());
    expect(refused).toMatch(/state file \S+ is unreadable \(.*\): refusing to guess a floor/);
    expect(refused).toMatch(howToStartFresh);
  });

  it('refuses an empty state file, in one line saying how to start fresh; freshState starts new over it', async () => {
    const file = stateFile();
    writeFileSync(file, '');
    const refused = await refusal(open(file).lease.start());
    expect(refused).toMatch(
      /^the standalone state file \S+state\.json is empty \(a write cut short, e\.g\. by a power loss\)/,
    );
    expect(refused).toMatch(howToStartFresh);
    expect(refused).not.toMatch(/\n/);
    expect(readFileSync(file, 'utf8')).toBe(''); // untouched
    expect(readdirSync(dirname(file)).filter((n) => n.includes('.lock'))).toEqual([
      'state.json.lock.1', // the newest generation is never deleted, so generation numbers never repeat
      'state.json.lock.1.released',
    ]);

    // The emptying is the state directory's last change the file system saw: a fresh start mints above it + TTL +
    // bound, as after an unclean end then, whatever its own clock says (here a minute behind the file system's).
    const emptiedAt = Math.ceil(statSync(file).mtimeMs);
    const behind = createTestClock(emptiedAt - 60_000);
    const fresh = open(file, behind, new RecordingTarget('fresh'), 0, { freshState: true });
    await fresh.lease.start();
    const floor = fresh.target.assignment?.floorMs ?? Number.NaN;
    expect(floor).toBeGreaterThanOrEqual(emptiedAt + STANDALONE_STATE_TTL_MS + 10);
    expect(fresh.lease.snapshot().message).toMatch(
      /started fresh \(freshState\) over a state file that is empty: minting above \d+ \(its directory last changed at \d+, \+ TTL \+ bound\)/,
    );
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ ms: floor, released: false });
  });

  it('refuses a state file missing after a previous run (its .created marker says so); a directory that never held one starts new', async () => {
    const file = stateFile();
    const first = open(file);
    await first.lease.start(); // a new state file: accepted, and the marker written before it
    expect(existsSync(`${file}.created`)).toBe(true);
    await first.lease.release();
    unlinkSync(file); // what a file system that lost the last writes, or a careless clean-up, leaves
    const refused = await refusal(open(file).lease.start());
    expect(refused).toMatch(/state file \S+state\.json is missing, but \S+state\.json\.created says a previous run/);
    expect(refused).toMatch(howToStartFresh);
    const fresh = open(file, createTestClock(T), new RecordingTarget('fresh'), 0, { freshState: true });
    await fresh.lease.start();
    expect(fresh.lease.snapshot().message).toMatch(/started fresh \(freshState\) over a state file that is missing/);
  });

  it('freshState never throws away a readable state: its floor still holds', async () => {
    const file = stateFile();
    writeFileSync(file, JSON.stringify({ ms: T, released: true, nodeId: 'solo', at: '' }));
    const { lease, target } = open(file, createTestClock(T - 5_000), new RecordingTarget('t'), 0, { freshState: true });
    await lease.start();
    expect(target.assignment?.floorMs).toBe(T);
  });
});

describe('the lock is taken over only from a holder that is provably gone (issue 21)', () => {
  it('takes over at once from a holder whose pid is gone, or reused by a later process, or from before the last boot', async () => {
    for (const gone of [
      { pid: deadPid() },
      { pid: process.pid, startTicks: '1' },
      { bootId: 'a-boot-before-this-one' },
    ]) {
      const file = stateFile();
      lockOf(file, 4, gone);
      writeFileSync(`${file}.lock.3`, 'an older generation, deleted by the next holder');
      const { lease, target } = open(file);
      await lease.start();
      expect(target.assignment?.worker).toBe(5);
      expect(readdirSync(dirname(file)).filter((n) => n.includes('.lock'))).toEqual(['state.json.lock.5']);
    }
  });

  it('takes over a released lock, whoever held it', async () => {
    const file = stateFile();
    lockOf(file, 1, {});
    writeFileSync(`${file}.lock.1.released`, '{}');
    const { lease } = open(file);
    await lease.start();
    expect(lease.snapshot().state).toBe('alive');
  });

  it('never takes over a live holder, nor one it cannot judge: refuses naming it and what to delete', async () => {
    const cases: [Partial<LockHolder> | 'legacy' | 'garbled', RegExp][] = [
      [{}, /holds \S+: pid \d+ \(node other\) since 2026-12-01T20:01:02Z, still running/],
      [
        { host: 'elsewhere' },
        /may hold \S+ \(pid \d+ .*\): it ran on host elsewhere, whose .*; if no node runs on it, delete \S+\.lock\.1$/,
      ],
      [
        { pidNamespace: 'pid:[1]' },
        /it ran in another PID namespace \(pid:\[1\]; a container\?\); .*delete \S+\.lock\.1$/,
      ],
      ['garbled', /its lock file cannot be read .*; if no node runs on it, delete \S+\.lock\.1$/],
      [
        'legacy',
        /an older idgen \(proper-lockfile\) locked it, .*; if no node runs on it, delete \S+state\.json\.lock$/,
      ],
    ];
    for (const [holder, said] of cases) {
      const file = stateFile();
      if (holder === 'legacy') mkdirSync(`${file}.lock`);
      else if (holder === 'garbled') writeFileSync(`${file}.lock.1`, '{"pid": 1');
      else lockOf(file, 1, holder);
      const { lease, target } = open(file);
      expect(await refusal(lease.start())).toMatch(said);
      expect(target.assignment).toBeUndefined();
      expect(existsSync(file)).toBe(false);
    }
  });

  it('while it waits, says once whose lock it waits for (claiming), then refuses', async () => {
    const file = stateFile();
    lockOf(file, 1, {});
    const { lease } = open(file, createTestClock(T), new RecordingTarget('t'), 600);
    const said: LeaseSnapshot[] = [];
    lease.on('state', (s) => said.push(s));
    await refusal(lease.start());
    expect(said.map((s) => `${s.state}: ${s.message}`)).toEqual([
      `claiming: waiting for the state file's lock, held by pid ${process.pid} (node other) since 2026-12-01T20:01:02Z`,
      expect.stringMatching(/^idle: start failed: LeaseError: another standalone node holds/),
    ]);
  });
});

describe('no state write and no ceiling raise without a lock proven held within the deadline (issue 21)', () => {
  it('each write moves the deadline from its proof; past the deadline the lease fences and writes nothing more', async () => {
    const file = stateFile();
    const clock = createTestClock(T);
    const { lease, target } = open(file, clock, new RecordingTarget('t'), 0, { stateIntervalMs: 10 });
    await lease.start();
    expect(target.assignment?.deadlineMonoMs).toBe(1_000 + PROOF_WINDOW);
    clock.advance(1_000);
    await target.waitFor((e) => e.kind === 'extend' && e.deadline === 2_000 + PROOF_WINDOW);
    expect(target.ceiling).toBe(T + 1_000 + STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS);

    clock.advance(PROOF_WINDOW); // as a process stopped that long finds on resuming, before any timer of it ran
    const fenced = await target.waitFor((e) => e.kind === 'unassign');
    expect(fenced).toMatchObject({ reason: 'lease', message: expect.stringMatching(/past the 3500 ms deadline$/) });
    expect(lease.snapshot()).toMatchObject({
      state: 'fenced',
      message: expect.stringMatching(/for good; restart the node$/),
    });
    const last = readFileSync(file, 'utf8');
    expect(JSON.parse(last)).toMatchObject({ ms: T + 1_000, released: false });
    clock.advance(100);
    await sleep(100); // ten intervals
    expect(readFileSync(file, 'utf8')).toBe(last);
    expect(target.events.slice(target.events.indexOf(fenced)).map((e) => e.kind)).toEqual(['unassign']);

    await lease.release(); // no release record either: the next run waits as after a crash
    expect(readFileSync(file, 'utf8')).toBe(last);
    const next = open(file, clock, new RecordingTarget('next'));
    await next.lease.start(); // at once: the fenced holder marked its lock released
    expect(next.target.assignment?.floorMs).toBe(T + 1_000 + STANDALONE_STATE_TTL_MS + 10);
  });

  it('a newer lock generation, or its lock file removed: the lease fences before its next write', async () => {
    for (const how of ['newer', 'removed'] as const) {
      const file = stateFile();
      const clock = createTestClock(T);
      const { lease, target } = open(file, clock, new RecordingTarget('t'), 0, { stateIntervalMs: 10 });
      await lease.start();
      const before = readFileSync(file, 'utf8');
      if (how === 'newer') writeFileSync(`${file}.lock.2`, readFileSync(`${file}.lock.1`));
      else unlinkSync(`${file}.lock.1`);
      clock.advance(500); // a write now would change the file
      const fenced = await target.waitFor((e) => e.kind === 'unassign');
      expect(fenced.message).toMatch(
        how === 'newer'
          ? /another process took the lock on \S+ \(\S+\.lock\.2\)/
          : /the lock file \S+\.lock\.1 was removed/,
      );
      expect(readFileSync(file, 'utf8')).toBe(before);
      expect(target.ceiling).toBe(Number.NEGATIVE_INFINITY);
    }
  });
});

describe('every state write: written, fsynced, renamed, its directory fsynced (issue 21)', () => {
  /** node:fs/promises, with each write-path call logged (temporary names shown as <tmp>) and fsync breakable. */
  function recordingIo(
    dir: string,
    log: string[],
    failSync: (name: string) => boolean,
    beforeOpen: (name: string) => Promise<void> = async () => undefined,
  ): StandaloneIo {
    const name = (p: string): string => (p === dir ? '<dir>' : basename(p).replace(/\.[0-9a-f]{16}\.tmp$/, '.<tmp>'));
    return {
      ...nodeStandaloneIo,
      open: async (path, flags, mode) => {
        await beforeOpen(name(path));
        const fh = await nodeStandaloneIo.open(path, flags, mode);
        log.push(`open ${flags} ${name(path)}`);
        return {
          writeFile: async (data) => {
            log.push(`write ${name(path)}`);
            await fh.writeFile(data);
          },
          sync: async () => {
            if (failSync(name(path))) {
              log.push(`sync ${name(path)}: EIO`);
              throw Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' });
            }
            log.push(`sync ${name(path)}`);
            await fh.sync();
          },
          close: async () => {
            log.push(`close ${name(path)}`);
            await fh.close();
          },
        };
      },
      rename: async (from, to) => {
        log.push(`rename ${name(from)} ${name(to)}`);
        await nodeStandaloneIo.rename(from, to);
      },
      link: async (from, to) => {
        log.push(`link ${name(from)} ${name(to)}`);
        await nodeStandaloneIo.link(from, to);
      },
      unlink: async (path) => {
        log.push(`unlink ${name(path)}`);
        await nodeStandaloneIo.unlink(path);
      },
    };
  }
  const durably = (file: string, target: string): string[] => [
    `open w ${file}.<tmp>`,
    `write ${file}.<tmp>`,
    `sync ${file}.<tmp>`,
    `close ${file}.<tmp>`,
    `rename ${file}.<tmp> ${target}`,
    'open r <dir>',
    'sync <dir>',
    'close <dir>',
  ];

  it('the lock, the marker and each state: fsynced before they get their name, the directory fsynced after', async () => {
    const file = stateFile();
    const log: string[] = [];
    const clock = createTestClock(T);
    const { lease, target } = open(
      file,
      clock,
      undefined,
      0,
      { stateIntervalMs: 10 },
      recordingIo(dirname(file), log, () => false),
    );
    await lease.start();
    expect(log).toEqual([
      'open w state.json.lock.<tmp>',
      'write state.json.lock.<tmp>',
      'sync state.json.lock.<tmp>',
      'close state.json.lock.<tmp>',
      'link state.json.lock.<tmp> state.json.lock.1',
      'unlink state.json.lock.<tmp>',
      'open r <dir>',
      'sync <dir>',
      'close <dir>',
      ...durably('state.json.created', 'state.json.created'),
      ...durably('state.json', 'state.json'),
    ]);
    log.length = 0;
    await target.waitFor((e) => e.kind === 'extend');
    expect(log.slice(0, 8)).toEqual(durably('state.json', 'state.json'));
  });

  it('a write whose fsync fails renames nothing and raises no ceiling; the next one that succeeds does', async () => {
    const file = stateFile();
    const log: string[] = [];
    let failing = false;
    // Between two writes, held before the next one opens its temporary file: the moment to look for leftovers.
    let held: { reached: () => void; release: Promise<void> } | undefined;
    const clock = createTestClock(T);
    const io = recordingIo(
      dirname(file),
      log,
      (n) => failing && n === 'state.json.<tmp>',
      async (n) => {
        if (n !== 'state.json.<tmp>' || held === undefined) return;
        const h = held;
        held = undefined;
        h.reached();
        await h.release;
      },
    );
    const { lease, target } = open(file, clock, undefined, 0, { stateIntervalMs: 10 }, io);
    await lease.start();
    const ceiling = T + STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS;
    await target.waitFor((e) => e.kind === 'extend');
    log.length = 0;
    failing = true;
    clock.advance(500); // a write that landed would now raise the ceiling
    await until('a failed write', () => /writing the state file failed: Error: EIO/.test(lease.snapshot().message));
    let release = (): void => undefined;
    await new Promise<void>((reached) => {
      held = { reached, release: new Promise<void>((r) => (release = r)) };
    });
    expect(log).toContain('sync state.json.<tmp>: EIO');
    expect(log).toContain('unlink state.json.<tmp>');
    expect(log).not.toContain('rename state.json.<tmp> state.json');
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ ms: T });
    expect(target.ceiling).toBe(ceiling);
    expect(readdirSync(dirname(file)).filter((n) => n.endsWith('.tmp'))).toEqual([]); // each failed one removed
    expect(lease.snapshot().state).toBe('alive'); // within the deadline (the guard stops at the ceiling meanwhile)

    failing = false;
    release();
    await target.waitFor((e) => e.kind === 'extend' && e.ceiling === ceiling + 500);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ ms: T + 500 });
    await until('the message back', () => !/failed/.test(lease.snapshot().message));
  });
});

describe('defaultStandaloneStateFile (issue 21: a directory that survives a reboot)', () => {
  it('is /var/lib/idgen as root, else $XDG_STATE_HOME (absolute) or ~/.local/state, never the temp directory', () => {
    const home = { HOME: '/home/u' };
    expect(defaultStandaloneStateFile(2, { ...home, XDG_STATE_HOME: '/xdg' }, 1000)).toBe(
      '/xdg/idgen/standalone-region-2.json',
    );
    expect(defaultStandaloneStateFile(2, { ...home, XDG_STATE_HOME: 'relative/ignored' }, 1000)).toBe(
      '/home/u/.local/state/idgen/standalone-region-2.json',
    );
    expect(defaultStandaloneStateFile(2, home, 1000)).toBe('/home/u/.local/state/idgen/standalone-region-2.json');
    expect(defaultStandaloneStateFile(0, { ...home, XDG_STATE_HOME: '/xdg' }, 0)).toBe(
      '/var/lib/idgen/standalone-region-0.json',
    );
    expect(defaultStandaloneStateFile(7, {}, 1000)).toBe(
      join(homedir(), '.local/state/idgen/standalone-region-7.json'),
    );
    expect(defaultStandaloneStateFile(1).startsWith(tmpdir())).toBe(false);
  });
});
