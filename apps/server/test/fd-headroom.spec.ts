// Descriptor headroom: a node under a low open-files limit caps its serving port's connections below
// that limit, so clients holding connections cannot take the descriptors chronyc (and etcd) need. Measured before:
// at `ulimit -n 1024`, 1,004 idle connections made `spawn chronyc` fail with EMFILE and the node fenced itself on
// its time source. Here: `ulimit -n 512`, a chronyc stub on PATH, 600 idle HTTP/2 connections held across several
// time-source checks; the node must stay ready (no time-source fence) and refuse the connections past its cap.
import { connect as netConnect, type Socket } from 'node:net';
import { delimiter } from 'node:path';
import { FrameType, PREFACE } from '@idgen/h2';
import { CHRONY_HEALTHY, cleanupAll, createChronyStub, spawnProcess } from '@idgen/testing';
import { DESCRIPTOR_HEADROOM, connectionCap, openFilesLimit } from '@idgen/serving';
import { NODE_ARGV, idClient, parseLine, sleep, standaloneStateFile } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const OPEN_FILES = 512;
const HEADROOM = 128;
const CONNECTIONS = 600;

/** A counter or gauge from a Prometheus text scrape (0 when the series is absent). */
function sample(text: string, name: string, label: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(label));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

/** An idle HTTP/2 connection (preface and SETTINGS, then nothing); `closed` says whether the server ended it. */
function idleConnection(port: number): Promise<{ socket: Socket; closed: () => boolean }> {
  return new Promise((resolve) => {
    let closed = false;
    const socket = netConnect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.on('data', () => undefined);
    socket.once('close', () => (closed = true));
    socket.once('connect', () => {
      socket.write(Buffer.concat([PREFACE, Buffer.from([0, 0, 0, FrameType.SETTINGS, 0, 0, 0, 0, 0])]));
      resolve({ socket, closed: () => closed });
    });
    socket.once('close', () => resolve({ socket, closed: () => closed }));
  });
}

describe('connectionCap', () => {
  const limits = (soft: string) =>
    `Limit                     Soft Limit           Hard Limit           Units     \nMax processes             63704                63704                processes \nMax open files            ${soft}                 524288               files     \n`;

  it('reads the soft open-files limit', () => {
    expect(openFilesLimit(limits('1024'))).toBe(1024);
    expect(openFilesLimit(limits('unlimited'))).toBeUndefined();
    expect(openFilesLimit('')).toBeUndefined();
  });

  it('is the configured cap, lowered to the limit less the headroom (at least 1)', () => {
    expect(DESCRIPTOR_HEADROOM).toBe(HEADROOM);
    expect(connectionCap(4_096, 1_024)).toEqual({
      maxConnections: 1_024 - HEADROOM,
      openFilesLimit: 1_024,
      lowered: true,
    });
    expect(connectionCap(4_096, 1_048_576)).toEqual({
      maxConnections: 4_096,
      openFilesLimit: 1_048_576,
      lowered: false,
    });
    expect(connectionCap(4_096, 64).maxConnections).toBe(1);
  });
});

describe(`a node at ulimit -n ${OPEN_FILES} with --time-source chrony`, () => {
  it('caps connections below the limit, refuses the rest, and keeps reading chronyc (stays ready)', async () => {
    const chrony = createChronyStub(CHRONY_HEALTHY);
    const clean: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('IDGEN_')) clean[k] = v;
    const args = [
      '--standalone',
      '--state-file',
      standaloneStateFile(),
      '--time-source',
      'chrony',
      '--listen',
      '127.0.0.1:0',
      '--metrics-listen',
      '127.0.0.1:0',
    ];
    // `exec`: the shell becomes the node, under the lower limit (a missing sh or node fails the spawn loudly).
    const proc = spawnProcess(
      'sh',
      ['-c', `ulimit -n ${OPEN_FILES} && exec "$0" "$@"`, process.execPath, ...NODE_ARGV, ...args],
      {
        env: { ...clean, PATH: `${chrony.dir}${delimiter}${process.env['PATH'] ?? ''}` },
      },
    );
    const sockets: Socket[] = [];
    try {
      const cap = parseLine(await proc.waitForLine(/"msg":"connection cap/, 15_000)) ?? {};
      expect(cap).toMatchObject({
        maxConnections: OPEN_FILES - HEADROOM,
        configured: 4096,
        openFilesLimit: OPEN_FILES,
      });
      const port = Number(
        String(parseLine(await proc.waitForLine(/"msg":"serving port open/, 15_000))?.['listen'])
          .split(':')
          .pop(),
      );
      const metricsUrl = String(parseLine(await proc.waitForLine(/"msg":"metrics listening"/, 15_000))?.['metrics']);
      await proc.waitForLine(/"msg":"ready"/, 20_000);
      // The probe's own connection first: it holds one of the capped places.
      const client = idClient(`http://127.0.0.1:${port}`, 'grpc-h2');
      expect((await client.nextIds({ count: 1 })).blocks).toHaveLength(1);

      const held: { socket: Socket; closed: () => boolean }[] = [];
      for (let i = 0; i < CONNECTIONS; i += 50) {
        held.push(...(await Promise.all(Array.from({ length: 50 }, () => idleConnection(port)))));
      }
      sockets.push(...held.map((h) => h.socket));
      // Held across three time-source checks (every 5 s): each spawns chronyc with the cap's connections open.
      const failures: number[] = [];
      for (let t = 0; t < 16; t++) {
        await sleep(1_000);
        const ok = await client.nextIds({ count: 1 }, { signal: AbortSignal.timeout(2_000) }).then(
          (r) => r.blocks.length === 1,
          () => false,
        );
        if (!ok) failures.push(t);
      }
      const metrics = await (await fetch(metricsUrl, { signal: AbortSignal.timeout(5_000) })).text();
      const refused = sample(metrics, 'idgen_h2_refusals_total', 'reason="connection-limit"');
      const open = held.filter((h) => !h.closed()).length;
      console.log(
        `ulimit -n ${OPEN_FILES}: ${open} of ${CONNECTIONS} idle connections kept, ${refused} refused (connection-limit); probe failures ${failures.length}/16`,
      );

      expect(proc.exitStatus()).toBeUndefined();
      expect(failures).toEqual([]);
      expect(sample(metrics, 'idgen_node_ready', '')).toBe(1);
      expect(sample(metrics, 'idgen_fences_total', 'reason="time-source"')).toBe(0);
      expect(proc.lines.filter((l) => l.includes('time source unhealthy'))).toEqual([]);
      expect(open).toBeLessThanOrEqual(OPEN_FILES - HEADROOM - 1);
      expect(refused).toBeGreaterThanOrEqual(CONNECTIONS - (OPEN_FILES - HEADROOM - 1));
    } finally {
      for (const s of sockets) s.destroy();
      await proc.stop();
    }
  });
});
