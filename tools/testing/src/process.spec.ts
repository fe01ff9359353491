import { existsSync, readFileSync } from 'node:fs';
import { tempDir } from './net.js';
import { spawnProcess } from './process.js';
import { tsNodeArgs } from './ts-node.js';
import { cleanupAll, liveCount } from './registry.js';

jest.setTimeout(30_000);

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

describe('spawnProcess', () => {
  it('collects lines and waits for one, before or after it is printed', async () => {
    const p = spawnProcess(process.execPath, ['-e', 'console.log("hello"); setTimeout(() => console.error("ready 42"), 200); setTimeout(() => {}, 600)']);
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
    expect(alive(a.pid)).toBe(false);
    expect(alive(b.pid)).toBe(false);
    expect(existsSync(dir.path)).toBe(false);
  });

  it('a process exit hook kills what a crashed test file left behind', async () => {
    // a child node process uses the harness, starts a grandchild, and exits without cleaning up
    const script = `
      const { spawnProcess } = require(${JSON.stringify(require.resolve('./process.ts'))});
      const p = spawnProcess(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
      console.log('grandchild ' + p.pid);
      setTimeout(() => process.exit(1), 100);
    `;
    const p = spawnProcess(process.execPath, tsNodeArgs('-e', script));
    const line = await p.waitForLine(/grandchild \d+/, 15_000);
    await p.exited;
    const pid = Number(line.split(' ')[1]);
    expect(alive(pid)).toBe(false);
  });
});
