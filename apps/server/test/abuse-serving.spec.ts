// Attacks on the serving path above the frame level (issue 13) against a real idgen-server process: an HTTP/1.1
// slowloris that never reads its answers, an endless chunked body to /healthz, and GetStatus calls held open by
// the thousand. Each runs from a process of its own (abuse-serving-attacker.js) for a bounded time while a probe
// client makes one NextIds call every 250 ms on a connection of its own. Each must leave the server's RSS under
// 400 MB, at most 10% of the probe's calls failing during it and none after, and the process alive
// (docs/design.md §8 item 4), and the attacker must not get what it came for.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, spawnProcess } from '@idgen/testing';
import { idClient, startServer, type ServerNode } from './support.js';

jest.setTimeout(240_000);
afterAll(() => cleanupAll());

const PROBE_EVERY_MS = 250;
const PROBE_DEADLINE_MS = 1_000;
const MAX_RSS_BYTES = 400 * 1024 * 1024;

interface AttackStats {
  connections: number;
  /** Connections the server ended before the attack was over. */
  cut: number;
  /** Age of the oldest connection still open when the attack ended (0: none was). */
  oldestOpenMs: number;
  /** Body bytes the kernel took from the attacker (h1-endless-body). */
  bytesAccepted: number;
  /** Calls opened (held-calls). */
  streamsOpened: number;
}

function rssBytes(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'))?.[1];
  return Number(kb ?? 0) * 1024;
}

async function probeOnce(client: ReturnType<typeof idClient>): Promise<boolean> {
  try {
    const res = await client.nextIds({ count: 1 }, { signal: AbortSignal.timeout(PROBE_DEADLINE_MS) });
    return res.blocks.length === 1;
  } catch {
    return false;
  }
}

/** Runs the attack `name` with `parallel` connections for `ms` while probing every 250 ms; checks the common bounds. */
async function attackWhileProbing(node: ServerNode, client: ReturnType<typeof idClient>, name: string, ms: number, parallel: number): Promise<AttackStats> {
  const attacker = spawnProcess(process.execPath, [join(__dirname, 'abuse-serving-attacker.js'), name, String(node.port), String(ms), String(parallel)]);
  let calls = 0;
  let failed = 0;
  let peakRss = 0;
  while (attacker.exitStatus() === undefined) {
    const started = Date.now();
    calls++;
    if (!(await probeOnce(client))) failed++;
    peakRss = Math.max(peakRss, rssBytes(node.process.pid));
    const wait = PROBE_EVERY_MS - (Date.now() - started);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  const exit = await attacker.exited;
  const line = attacker.stdoutLines.find((l) => l.startsWith('{"connections"'));
  if (exit.code !== 0 || line === undefined) throw new Error(`attacker ${name} failed (${JSON.stringify(exit)}): ${attacker.tail(20)}`);
  const stats = JSON.parse(line) as AttackStats;
  const after: boolean[] = [];
  for (let i = 0; i < 4; i++) after.push(await probeOnce(client));
  console.log(`${name}: ${JSON.stringify(stats)}; probes ${failed}/${calls} failed; peak RSS ${Math.round(peakRss / 1e6)} MB`);
  expect(node.process.exitStatus()).toBeUndefined();
  expect(peakRss).toBeLessThan(MAX_RSS_BYTES);
  expect(failed).toBeLessThanOrEqual(Math.floor(calls / 10));
  expect(after).toEqual([true, true, true, true]);
  return stats;
}

describe('idgen-server: the serving path under abuse', () => {
  let node: ServerNode;
  let client: ReturnType<typeof idClient>;
  beforeAll(async () => {
    node = await startServer(['--time-source', 'none', '--metrics-listen', 'off']);
    await node.ready();
    client = idClient(node.baseUrl, 'grpc-h2');
    expect(await probeOnce(client)).toBe(true);
  });
  afterAll(() => node.stop());

  it('HTTP/1.1 slowloris that never reads: every connection is cut (pipelining bound), none held to the end', async () => {
    // 50 connections pipelining /healthz requests by the megabyte and never reading: each is cut once one read
    // brings more than 64 requests (before: every one held for the whole attack, 21 of ~100 probes failed).
    const stats = await attackWhileProbing(node, client, 'h1-no-read', 20_000, 50);
    expect(stats.cut).toBeGreaterThanOrEqual(50);
    expect(stats.oldestOpenMs).toBeLessThan(20_000);
  });

  it('an endless chunked body to /healthz: answered, then the connection is closed, the body not read', async () => {
    const stats = await attackWhileProbing(node, client, 'h1-endless-body', 5_000, 4);
    // Each connection: what the kernel buffers on loopback (a few MB at most) before the server closes it.
    expect(stats.cut).toBeGreaterThan(0);
    expect(stats.bytesAccepted / stats.connections).toBeLessThan(16 * 1024 * 1024);
  });

  it('300 connections × 128 GetStatus calls held open (no body): cancelled at the request deadline, bounded', async () => {
    const stats = await attackWhileProbing(node, client, 'held-calls', 8_000, 300);
    // The attacker replaces each call the server ends: more than 300 × 128 opened means held ones were cancelled.
    expect(stats.streamsOpened).toBeGreaterThan(300 * 128);
  });
});
