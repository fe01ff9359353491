import { mkdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createTestClock } from '@idgen/clock-guard/testing';
import { cleanupAll, tempDirSync } from '@idgen/testing';
import { LeaseConfigError, isLeaseError } from './errors.js';
import { RecordingTarget } from './recording-target.test-helper.js';
import { STANDALONE_STATE_MARGIN_MS, STANDALONE_STATE_TTL_MS, createStandaloneLease } from './standalone-lease.js';
import type { WorkerLease } from './types.js';

const T = 1_800_000_000_000;
const leases: WorkerLease[] = [];

afterEach(async () => {
  await Promise.all(leases.splice(0).map((l) => l.release()));
});
afterAll(() => cleanupAll());

function stateFile(): string {
  return join(tempDirSync('standalone').path, 'state.json');
}

function open(file: string, clock = createTestClock(T), target = new RecordingTarget('t'), lockWaitMs = 0) {
  const lease = createStandaloneLease(
    { region: 3, workers: '5-9', clock, nodeId: 'solo', stateFile: file, lockWaitMs },
    target,
  );
  leases.push(lease);
  return { lease, target, clock };
}

describe('createStandaloneLease (one node only, asked for by name)', () => {
  it('assigns the first worker of the range above a new state file, with a wall ceiling; release unassigns', async () => {
    const file = stateFile();
    const { lease, target } = open(file);
    const states: string[] = [];
    lease.on('state', (s) => states.push(s.state));
    await lease.start();
    expect(target.assignment).toEqual({
      region: 3,
      worker: 5,
      floorMs: 1_704_067_199_999, // never used: nothing below the epoch
      deadlineMonoMs: Infinity,
      ceilingMs: T + STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS,
    });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ ms: T, released: false, nodeId: 'solo' });
    expect(lease.snapshot()).toMatchObject({
      state: 'alive',
      mode: 'standalone',
      region: 3,
      worker: 5,
      nodeId: 'solo',
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
    const refused = await second.lease.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isLeaseError(refused) && refused.code === 'state-file').toBe(true);
    expect(String(refused)).toMatch(/another standalone node holds .*state\.json/);
    expect(second.target.assignment).toBeUndefined();
    await leases[0]?.release();
    await second.lease.start();
    expect(second.target.assignment?.worker).toBe(5);
  });

  it('after a crash, a restart mints only above last written + TTL + clock bound, even with the clock stepped back', async () => {
    const file = stateFile();
    // What a SIGKILLed node leaves: its last state (ms T, not released) and a lock nobody refreshes any more.
    writeFileSync(
      file,
      JSON.stringify({ ms: T, released: false, nodeId: 'solo', at: '', ttlMs: STANDALONE_STATE_TTL_MS }),
    );
    mkdirSync(`${file}.lock`);
    const longAgo = new Date(Date.now() - 60_000);
    utimesSync(`${file}.lock`, longAgo, longAgo);
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

  it('refuses a garbled state file rather than guess a floor', async () => {
    const file = stateFile();
    writeFileSync(file, '{"ms": "soon"}');
    await expect(open(file).lease.start()).rejects.toThrow(/state file is unreadable/);
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
  });
});
