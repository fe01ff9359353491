import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { DEFAULT_LAYOUT } from '@idgen/core';

/** Where Debian's libfaketime puts the preload library (docs/toolchain.md "Clock faults"). */
function libfaketime(): string {
  const listed = spawnSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8' });
  const path = (listed.stdout ?? '').split('\n').find((l) => l.endsWith('/libfaketime.so.1'));
  if (path === undefined || !existsSync(path)) {
    throw new Error("libfaketime.so.1 not found: install Debian's faketime package (apt-get install faketime)");
  }
  return path;
}

interface Event {
  event: string;
  state?: string;
  reason?: string;
  wallMs: number;
  monoMs: number;
  minted?: number;
  refused?: number;
}

describe('a real wall-clock jump back in a real process (libfaketime)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'idgen-faketime-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('fences on a 2 s rollback instead of duplicating, and recovers when the clock passes its last millisecond', async () => {
    const control = join(dir, 'faketime');
    const out = join(dir, 'blocks.bin');
    writeFileSync(control, '+0\n');
    const child = spawn(process.execPath, [join(__dirname, 'faketime-child.js'), out, '4500'], {
      env: {
        ...process.env,
        LD_PRELOAD: libfaketime(),
        FAKETIME_TIMESTAMP_FILE: control,
        FAKETIME_NO_CACHE: '1',
        DONT_FAKE_MONOTONIC: '1',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const events: Event[] = [];
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      for await (const line of createInterface({ input: child.stdout })) {
        const e = JSON.parse(line) as Event;
        events.push(e);
        // Half a second into minting, the wall clock jumps back 2 s; the monotonic clock does not.
        if (e.event === 'ready') setTimeout(() => writeFileSync(control, '-2\n'), 500);
      }
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }

    // 1. Every block is above the one before: no duplicate, nothing minted below an earlier ID.
    const raw = readFileSync(out);
    expect(raw.length % 12).toBe(0);
    let last = -1n;
    let ids = 0;
    let maxMsBefore = 0;
    let firstMsAfter = 0;
    const jumpAt = events.find((e) => e.event === 'state' && e.reason === 'clock-rollback');
    for (let off = 0; off < raw.length; off += 12) {
      const first = raw.readBigUInt64BE(off);
      const count = raw.readUInt32BE(off + 8);
      expect(first > last).toBe(true);
      last = first + BigInt(count) - 1n;
      ids += count;
      const ms = DEFAULT_LAYOUT.unixMsOf(first);
      if (
        firstMsAfter === 0 &&
        ms > maxMsBefore &&
        maxMsBefore > 0 &&
        jumpAt !== undefined &&
        ms > jumpAt.wallMs + 1500
      ) {
        firstMsAfter = ms;
      }
      maxMsBefore = Math.max(maxMsBefore, ms);
    }
    const done = events.find((e) => e.event === 'done');
    expect(done?.minted).toBe(ids);
    expect(ids).toBeGreaterThan(10_000);

    // 2. It fenced for the rollback, refused meanwhile, and came back to serving.
    const states = events.filter((e) => e.event === 'state').map((e) => e.reason ?? e.state);
    expect(states).toEqual(['serving', 'clock-rollback', 'serving']);
    expect(done?.refused).toBeGreaterThan(0);
    const fenced = events.find((e) => e.reason === 'clock-rollback') as Event;
    const back = events.filter((e) => e.state === 'serving')[1] as Event;
    // The fence lasted about the 2 s the clock went back (on the monotonic clock).
    expect(back.monoMs - fenced.monoMs).toBeGreaterThan(1_500);
    expect(back.monoMs - fenced.monoMs).toBeLessThan(2_600);
  }, 30_000);
});
