// Attacks on the serving path above the frame level against a real idgen-server process: an HTTP/1.1
// slowloris that never reads its answers, an endless chunked body to /healthz, and GetStatus calls held open by
// the thousand. Each runs from a process of its own (abuse-serving-attacker.js) for a bounded time while a probe
// client makes one NextIds call every 250 ms on a connection of its own. Each must leave the server's RSS under
// 400 MB, at most 10% of the probe's calls failing during it and none after, and the process alive
// (docs/design.md §8 item 4), and the attacker must not get what it came for.
import { join } from 'node:path';
import { cleanupAll, shieldFromOutsideLoad, spawnProcess } from '@idgen/testing';
import { expectWithinBounds, probeOnce, probeWhile, type ProbeClient } from './abuse-support.test-helper.js';
import { idClient, memoryStateFile, startServer, type ServerNode } from './support.test-helper.js';

jest.setTimeout(240_000);
afterAll(() => cleanupAll());

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

/** Runs the attack `name` with `parallel` connections for `ms` while probing every 250 ms; checks the common bounds. */
async function attackWhileProbing(
  node: ServerNode,
  client: ProbeClient,
  name: string,
  ms: number,
  parallel: number,
): Promise<AttackStats> {
  const attacker = spawnProcess(process.execPath, [
    join(__dirname, 'abuse-serving-attacker.js'),
    name,
    String(node.port),
    String(ms),
    String(parallel),
  ]);
  shieldFromOutsideLoad(attacker.pid);
  const probe = await probeWhile(node, client, attacker.exited);
  const exit = await attacker.exited;
  const line = attacker.stdoutLines.find((l) => l.startsWith('{"connections"'));
  if (exit.code !== 0 || line === undefined)
    throw new Error(`attacker ${name} failed (${JSON.stringify(exit)}): ${attacker.tail(20)}`);
  const stats = JSON.parse(line) as AttackStats;
  console.log(
    `${name}: ${JSON.stringify(stats)}; probes ${probe.failed}/${probe.calls} failed; peak RSS ${Math.round(probe.peakRss / 1e6)} MB`,
  );
  expectWithinBounds(node, probe);
  return stats;
}

describe('idgen-server: the serving path under abuse', () => {
  let node: ServerNode;
  let client: ProbeClient;
  beforeAll(async () => {
    node = await startServer(['--time-source', 'none', '--metrics-listen', 'off', '--state-file', memoryStateFile()]);
    shieldFromOutsideLoad(node.process.pid);
    shieldFromOutsideLoad(0);
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
