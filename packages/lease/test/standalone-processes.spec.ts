import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { cleanupAll, spawnProcess, tempDirSync, tsNodeArgs } from '@idgen/testing';
import type { ProcessHandle } from '@idgen/testing';
import { isLeaseError } from '../src/errors.js';
import { RecordingTarget } from '../src/recording-target.test-helper.js';
import { STANDALONE_STATE_TTL_MS, createStandaloneLease } from '../src/standalone-lease.js';
import type { StandaloneLeaseOptions } from '../src/standalone-lease.js';
import type { WorkerLease } from '../src/types.js';

// Standalone holders in real processes: paused with SIGSTOP, their clocks stepped with libfaketime, killed.
jest.setTimeout(90_000);

const CHILD = join(__dirname, 'standalone-holder.test-helper.ts');
const leases: WorkerLease[] = [];

afterEach(async () => {
  await Promise.all(leases.splice(0).map((l) => l.release()));
});
afterAll(() => cleanupAll());

interface ChildEvent {
  readonly event: string;
  readonly mono: number;
  readonly wall: number;
  readonly [k: string]: unknown;
}

function stateFile(): string {
  return join(tempDirSync('standalone-procs').path, 'state.json');
}

function child(file: string, nodeId: string, extra: Partial<StandaloneLeaseOptions> = {}, env = {}): ProcessHandle {
  const options: StandaloneLeaseOptions = { region: 3, workers: '5-5', stateFile: file, nodeId, ...extra };
  return spawnProcess(process.execPath, tsNodeArgs(CHILD), {
    env: { ...process.env, ...env, IDGEN_TEST_STANDALONE: JSON.stringify(options) },
  });
}

function events(p: ProcessHandle, from = 0): ChildEvent[] {
  return p.stdoutLines
    .slice(from)
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as ChildEvent);
}

async function event(p: ProcessHandle, pattern: RegExp, timeoutMs = 30_000): Promise<ChildEvent> {
  return JSON.parse(await p.waitForLine(pattern, timeoutMs)) as ChildEvent;
}

function idsOf(p: ProcessHandle): string[] {
  return events(p)
    .filter((e) => e.event === 'ids')
    .flatMap((e) => e['ids'] as string[]);
}

/** The IDs both processes minted: what must stay empty. */
function bothMinted(a: ProcessHandle, b: ProcessHandle): string[] {
  const first = new Set(idsOf(a));
  return idsOf(b).filter((id) => first.has(id));
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('standalone holders in child processes (issue 21)', () => {
  it('a holder paused (SIGSTOP) past 5 s: a second process waits and names it, the resumed holder fences without writing, and the two never mint the same ID', async () => {
    const file = stateFile();
    const holder = child(file, 'paused-holder');
    await event(holder, /"event":"alive"/);
    await sleep(1_500); // a few state writes and mints
    holder.signal('SIGSTOP');
    await sleep(6_000); // past the 5 s after which proper-lockfile judged the lock stale by its mtime
    const stopped = readFileSync(file, 'utf8');
    const beforeResume = holder.stdoutLines.length; // everything it printed before the stop has arrived by now

    const second = child(file, 'second', { lockWaitMs: 60_000 });
    await event(second, /"event":"started"/);
    await sleep(3_000); // the old code took the lock over within its 500 ms retry
    expect(events(second).filter((e) => e.event === 'alive')).toEqual([]);
    const waiting = events(second).filter((e) => e.event === 'state' && e['state'] === 'claiming');
    expect(waiting.map((e) => e['message'])).toEqual([
      expect.stringMatching(
        new RegExp(
          `^waiting for the state file's lock, held by pid ${holder.pid} \\(node paused-holder\\) since \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$`,
        ),
      ),
    ]);

    holder.signal('SIGCONT');
    await event(holder, /"event":"unassign"/); // past its deadline: it fences before anything else
    await sleep(2_000); // time for the timers a resumed process would run
    const resumed = events(holder, beforeResume);
    expect(resumed.filter((e) => e.event === 'extend' || e.event === 'assign')).toEqual([]);
    expect(readFileSync(file, 'utf8')).toBe(stopped); // it wrote nothing
    expect(events(second).filter((e) => e.event === 'alive')).toEqual([]); // it is alive, so nobody took over

    // Killed, its lock is taken over at once, above everything it may have minted.
    const ceilings = events(holder)
      .filter((e) => e.event === 'assign' || e.event === 'extend')
      .map((e) => e['ceilingMs'] as number);
    await holder.kill();
    const alive = await event(second, /"event":"alive"/);
    expect(alive['floorMs']).toBeGreaterThan(Math.max(...ceilings));
    await sleep(500);
    expect((await second.stop()).code).toBe(0);
    expect(idsOf(holder).length).toBeGreaterThan(0);
    expect(idsOf(second).length).toBeGreaterThan(0);
    expect(bothMinted(holder, second)).toEqual([]);
  });

  it('a forward step of both wall clocks (libfaketime +10 s): the waiter does not take the lock over while the holder lives', async () => {
    const file = stateFile();
    const clockFile = join(dirname(file), 'faketime');
    writeFileSync(clockFile, '+0\n');
    const env = {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: clockFile,
      FAKETIME_NO_CACHE: '1',
      DONT_FAKE_MONOTONIC: '1',
    };
    const holder = child(file, 'stepped-holder', {}, env);
    await event(holder, /"event":"alive"/);
    const second = child(file, 'stepped-waiter', { lockWaitMs: 60_000 }, env);
    await event(second, /"event":"started"/);
    await sleep(1_500);
    writeFileSync(clockFile, '+10\n'); // both processes' Date.now() jumps 10 s; their monotonic clocks do not
    await sleep(4_000);
    expect(events(second).filter((e) => e.event === 'alive')).toEqual([]);
    expect(events(holder).filter((e) => e.event === 'unassign')).toEqual([]); // it still holds, and says so
    expect(events(holder).at(-1)?.wall).toBeGreaterThan(Date.now() + 5_000); // the step did happen

    expect((await holder.stop()).code).toBe(0); // a clean release lets the waiter in, right above it
    await event(second, /"event":"alive"/);
    await sleep(500);
    expect((await second.stop()).code).toBe(0);
    expect(idsOf(second).length).toBeGreaterThan(0);
    expect(bothMinted(holder, second)).toEqual([]);
  });

  it('a crashed holder (SIGKILL): a restart takes the lock over at once, above its last state + TTL + clock bound', async () => {
    const file = stateFile();
    const holder = child(file, 'doomed');
    await event(holder, /"event":"alive"/);
    await sleep(1_200);
    await holder.kill();
    const last = JSON.parse(readFileSync(file, 'utf8')) as { ms: number; released: boolean };
    expect(last.released).toBe(false);
    const target = new RecordingTarget('restart');
    const restart = createStandaloneLease(
      { region: 3, workers: '5-5', stateFile: file, nodeId: 'restart', lockWaitMs: 0 },
      target,
    );
    leases.push(restart);
    await restart.start(); // no wait: the holder's pid is gone
    expect(target.assignment?.floorMs).toBe(last.ms + STANDALONE_STATE_TTL_MS + 10);
  });

  it('while another process holds the lock, the lease says who (pid, node id, since) once, then refuses naming it', async () => {
    const file = stateFile();
    const holder = child(file, 'the-holder');
    await event(holder, /"event":"alive"/);
    const target = new RecordingTarget('waiter');
    const waiter = createStandaloneLease(
      { region: 3, workers: '5-5', stateFile: file, nodeId: 'waiter', lockWaitMs: 1_500 },
      target,
    );
    leases.push(waiter);
    const said: string[] = [];
    waiter.on('state', (s) => said.push(`${s.state}: ${s.message}`));
    const refused = await waiter.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    const held = `pid ${holder.pid} \\(node the-holder\\) since \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ`;
    expect(said).toEqual([
      expect.stringMatching(new RegExp(`^claiming: waiting for the state file's lock, held by ${held}$`)),
      expect.stringMatching(/^idle: start failed/),
    ]);
    expect(isLeaseError(refused) && refused.code === 'state-file').toBe(true);
    expect(String(refused)).toMatch(new RegExp(`another standalone node holds .*state\\.json: ${held}, still running`));
    expect(target.assignment).toBeUndefined();
    await holder.stop();
  });
});

/** Where Debian's libfaketime puts the preload library; missing: fail and say what to install. */
function libfaketime(): string {
  const listed = spawnSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8' });
  const path = (listed.stdout ?? '').split('\n').find((l) => l.endsWith('/libfaketime.so.1'));
  if (path === undefined)
    throw new Error("libfaketime.so.1 not found: install Debian's faketime package (apt-get install faketime)");
  return path;
}
