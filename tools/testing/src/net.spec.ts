import { readFileSync } from 'node:fs';
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

describe('freePort (CI: an etcd started on a port an outgoing connection or another test file had taken)', () => {
  const ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);

  it('hands out ports below the ephemeral range, never the same one twice in a row of 200, and none two workers share', async () => {
    const one = await portsAs('1', 200);
    const two = await portsAs('2', 200);
    for (const port of [...one, ...two]) {
      expect(port).toBeGreaterThanOrEqual(10_000);
      expect(port).toBeLessThan(ephemeralLow);
    }
    expect(new Set(one).size).toBe(200);
    expect(new Set(two).size).toBe(200);
    expect(one.filter((p) => two.includes(p))).toEqual([]);
    expect(Math.max(...one)).toBeLessThan(Math.min(...two)); // worker 1's block lies wholly below worker 2's
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
      expect(next === first + 6 || next < first).toBe(true); // the run skipped (or the block wrapped round)
    } finally {
      await Promise.all(taken.map((s) => new Promise((r) => s.close(r))));
    }
  });
});
