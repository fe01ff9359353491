import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:net';

/** `freePort` of a fresh copy of the module, loaded as Jest worker `worker`. */
async function freePortAs(worker: string): Promise<() => Promise<number>> {
  const saved = process.env['JEST_WORKER_ID'];
  let freePort: (() => Promise<number>) | undefined;
  process.env['JEST_WORKER_ID'] = worker;
  try {
    await jest.isolateModulesAsync(async () => {
      ({ freePort } = await import('./net.js'));
    });
  } finally {
    process.env['JEST_WORKER_ID'] = saved;
  }
  return freePort as () => Promise<number>;
}

/** The ports `freePort()` hands out in a fresh copy of the module loaded as Jest worker `worker`. */
async function portsAs(worker: string, count: number): Promise<number[]> {
  const freePort = await freePortAs(worker);
  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await freePort());
  return ports;
}

describe('freePort (CI: an etcd started on a port an outgoing connection or another test process had taken)', () => {
  const ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);

  it('hands out ports below the ephemeral range, and never one that another process was handed', async () => {
    // Two fresh copies of the module stand for two test processes (two Jest workers, or two projects side by side).
    const one = await portsAs('1', 300);
    const two = await portsAs('1', 300); // the same worker id, as two projects' first workers have
    for (const port of [...one, ...two]) {
      expect(port).toBeGreaterThanOrEqual(10_000);
      expect(port).toBeLessThan(ephemeralLow);
    }
    expect(new Set(one).size).toBe(300);
    expect(new Set(two).size).toBe(300);
    expect(one.filter((p) => two.includes(p))).toEqual([]);
    const reserved = new Set(readdirSync(join(tmpdir(), 'idgen-test-ports')).map(Number));
    expect([...one, ...two].filter((p) => !reserved.has(p))).toEqual([]);
  });

  it('skips a port something already listens on', async () => {
    const freePort = await freePortAs('3');
    const first = await freePort();
    // The next ones in turn would be first+1, first+2, ...: occupy five of them.
    const taken: Server[] = [];
    for (let p = first + 1; p <= first + 5; p++) {
      const s = createServer();
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(p, '127.0.0.1', () => resolve());
      });
      taken.push(s);
    }
    try {
      const next = await freePort();
      expect(next === first + 6 || next < first).toBe(true); // the run skipped (or the range wrapped round)
    } finally {
      await Promise.all(taken.map((s) => new Promise((r) => s.close(r))));
    }
  });
});
