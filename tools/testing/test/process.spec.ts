import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../src/net.js';
import { shebangNodeFlags, spawnProcess } from '../src/process.js';
import { tsNodeArgs } from '../src/ts-node.js';
import { cleanupAll, liveCount } from '../src/registry.js';

jest.setTimeout(60_000);

afterAll(async () => {
  await cleanupAll();
});

/** Running (a zombie waiting for its reaper counts as dead: it was killed, nobody has reaped it yet). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/**
 * Waits until `pid` is dead (gone, or a zombie) and says whether it was within `boundMs`. A SIGKILL is
 * delivered when the kernel next schedules the target, and a loaded machine may take a while: the test
 * waits for the state, with a generous bound, instead of assuming it is already reached.
 */
async function dies(pid: number, boundMs = 15_000): Promise<boolean> {
  const until = Date.now() + boundMs;
  while (alive(pid)) {
    if (Date.now() >= until) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
  return true;
}

describe('spawnProcess', () => {
  it('counts a process as ended once its output is read to the end, not at its exit', async () => {
    // Output can still be in the pipes, or on its way, when 'exit' comes: a waiter that gave up at 'exit' missed the
    // line (the lease's child-process spec saw only "started" from a child that printed its verdict and exited,
    // once in CI). Here the shell exits at once and what it started prints a moment later on the same pipe.
    const p = spawnProcess('sh', ['-c', 'echo first; (sleep 0.3; echo "late verdict") & exit 3']);
    await expect(p.waitForLine(/late verdict/, 30_000)).resolves.toBe('late verdict');
    expect(await p.exited).toEqual({ code: 3, signal: null });
    expect(p.stdoutLines).toEqual(['first', 'late verdict']);
  });

  it('collects lines and waits for one, before or after it is printed', async () => {
    const p = spawnProcess(process.execPath, [
      '-e',
      'console.log("hello"); setTimeout(() => console.error("ready 42"), 200); setTimeout(() => {}, 600)',
    ]);
    expect(await p.waitForLine(/ready (\d+)/, 5000)).toBe('ready 42');
    expect(await p.waitForLine(/hello/, 10)).toBe('hello');
    expect(p.stderrLines).toEqual(['ready 42']);
    const exit = await p.exited;
    expect(exit.code).toBe(0);
  });

  it('rejects waitForLine with the output tail when the process ends first', async () => {
    const p = spawnProcess(process.execPath, ['-e', 'console.log("bye"); process.exit(3)']);
    await expect(p.waitForLine(/never/, 5000)).rejects.toThrow(/process ended \(code 3[\s\S]*bye/);
  });

  it('rejects waitForLine after the timeout', async () => {
    const p = spawnProcess(process.execPath, ['-e', 'setTimeout(() => {}, 5000)']);
    await expect(p.waitForLine(/never/, 100)).rejects.toThrow(/timed out after 100 ms/);
    await p.kill();
  });

  it('signals: SIGSTOP and SIGCONT, then kill', async () => {
    const p = spawnProcess(process.execPath, ['-e', 'setInterval(() => console.log("tick"), 20)']);
    await p.waitForLine(/tick/);
    p.signal('SIGSTOP');
    await new Promise((r) => setTimeout(r, 100));
    const count = p.lines.length;
    await new Promise((r) => setTimeout(r, 200));
    expect(p.lines.length).toBe(count);
    p.signal('SIGCONT');
    await new Promise((r) => setTimeout(r, 200));
    expect(p.lines.length).toBeGreaterThan(count);
    const exit = await p.kill();
    expect(exit.signal).toBe('SIGKILL');
  });

  it('cleanupAll kills every started process and removes temp dirs, even ones a test forgot', async () => {
    const a = spawnProcess(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    const b = spawnProcess(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    b.signal('SIGSTOP');
    const dir = await tempDir('idgen-harness-test');
    expect(liveCount()).toBeGreaterThanOrEqual(3);
    await cleanupAll();
    expect(liveCount()).toBe(0);
    expect(await dies(a.pid)).toBe(true);
    expect(await dies(b.pid)).toBe(true);
    expect(existsSync(dir.path)).toBe(false);
  });

  it('a process exit hook kills what a crashed test file left behind', async () => {
    // a child node process uses the harness, starts a grandchild, and exits without cleaning up
    const script = `
      const { spawnProcess } = require(${JSON.stringify(require.resolve('../src/process.ts'))});
      const p = spawnProcess(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
      console.log('grandchild ' + p.pid);
      setTimeout(() => process.exit(1), 100);
    `;
    const p = spawnProcess(process.execPath, tsNodeArgs('-e', script));
    const line = await p.waitForLine(/grandchild \d+/, 15_000);
    await p.exited;
    const pid = Number(line.split(' ')[1]);
    // The exit hook sent SIGKILL as the child exited; the grandchild dies when the kernel gets to it, and
    // its zombie waits for PID 1 to reap it (a zombie counts as dead).
    expect(await dies(pid)).toBe(true);
  });
});

describe('shebangNodeFlags', () => {
  it("reads the node flags of a script's first line, and refuses a first line that is not a node shebang", async () => {
    const dir = await tempDir('shebang');
    const write = (name: string, first: string): string => {
      const file = join(dir.path, name);
      writeFileSync(file, `${first}\nconsole.log(1);\n`);
      return file;
    };
    expect(shebangNodeFlags(write('a.js', '#!/usr/bin/env -S node --max-semi-space-size=16 --no-warnings'))).toEqual([
      '--max-semi-space-size=16',
      '--no-warnings',
    ]);
    expect(shebangNodeFlags(write('b.js', '#!/usr/bin/env node'))).toEqual([]);
    expect(() => shebangNodeFlags(write('c.js', '// no shebang'))).toThrow(/first line is not/);
    expect(() => shebangNodeFlags(write('d.js', '#!/bin/sh'))).toThrow(/first line is not/);
  });
});
