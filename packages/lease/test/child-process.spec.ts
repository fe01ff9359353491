import { join } from 'node:path';
import { bindRegion, cleanupAll, spawnProcess, startEtcd, tsNodeArgs } from '@idgen/testing';
import type { EtcdServer, ProcessHandle } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import type { EtcdLeaseOptions } from '../src/config.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { leaseKeys, parseLastMsRecord } from '../src/records.js';
import { RecordingTarget, uniquePrefix } from '../src/recording-target.test-helper.js';
import type { WorkerLease } from '../src/types.js';

jest.setTimeout(180_000);

const CHILD = join(__dirname, 'hold-slot.test-helper.ts');
const RELEASE_MID_CLAIM = join(__dirname, 'release-mid-claim.test-helper.ts');
let etcd: EtcdServer;
let kv: Etcd3;
const leases: WorkerLease[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
  kv = new Etcd3({ hosts: [etcd.clientUrl] });
});

afterAll(async () => {
  await Promise.all(leases.map((l) => l.release()));
  kv?.close();
  await cleanupAll();
});

const TTL_MS = 3000;

function options(prefix: string, workers: string, nodeId: string): EtcdLeaseOptions {
  return {
    endpoints: [etcd.clientUrl],
    prefix,
    region: 2,
    workers,
    nodeId,
    ttlSeconds: TTL_MS / 1000,
    keepAliveIntervalMs: 500,
    keepAliveTimeoutMs: 400,
    fenceMarginMs: 1000,
    requestTimeoutMs: 1000,
    backoff: { initialMs: 50, maxMs: 300 },
  };
}

function child(o: EtcdLeaseOptions): ProcessHandle {
  return spawnProcess(process.execPath, tsNodeArgs(CHILD), {
    env: { ...process.env, IDGEN_TEST_LEASE: JSON.stringify(o) },
  });
}

interface ChildEvent {
  event: string;
  [k: string]: unknown;
}

async function event(p: ProcessHandle, pattern: RegExp, timeoutMs = 30_000): Promise<ChildEvent> {
  return JSON.parse(await p.waitForLine(pattern, timeoutMs)) as ChildEvent;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('holders in child processes', () => {
  it('unclean end (SIGKILL): the next holder waits until last-ms + TTL + 10 ms', async () => {
    const prefix = uniquePrefix('unclean');
    await bindRegion(etcd, 2, prefix, { ttlCeilingSeconds: TTL_MS / 1000 });
    const holder = child(options(prefix, '9-9', 'doomed'));
    const alive = await event(holder, /"event":"alive"/);
    expect(alive).toMatchObject({ region: 2, worker: 9 });
    console.log(
      `child process start to mint-ready slot: ${(alive['uptimeMs'] as number).toFixed(0)} ms ` +
        `(of which TypeScript loading before the script ran: ${(alive['scriptStartMs'] as number).toFixed(0)} ms)`,
    );
    await sleep(1200); // a few keep-alives and mints

    holder.signal('SIGKILL');
    const killedWall = Date.now();
    const killedMono = performance.now();
    await holder.exited;
    const mintedLines = holder.lines.filter((l) => l.includes('"minted"'));
    const lastPrinted = JSON.parse(mintedLines.at(-1) ?? '{"lastMinted":-1}') as { lastMinted: number };
    const record = parseLastMsRecord('k', (await kv.get(leaseKeys.lastMs(prefix, 2, 9)).string()) ?? '');
    expect(record.released).toBe(false);
    expect(record.nodeId).toBe('doomed');

    const target = new RecordingTarget('next');
    const next = createEtcdLease(options(prefix, '9-9', 'successor'), target);
    leases.push(next);
    const states: string[] = [];
    next.on('state', (s) => states.push(s.state));
    // the slot is busy until etcd expires the killed holder's lease; keep trying
    for (;;) {
      try {
        await next.start();
        break;
      } catch {
        await sleep(50);
      }
    }
    const assign = target.of('assign')[0];
    // The record's floor, last-ms + TTL + bound; the start hold (the claim's answer + TTL + bound, §5) comes after it.
    const floor = record.ms + TTL_MS + 10;
    expect(assign?.assignment?.floorMs).toBeGreaterThanOrEqual(floor);
    expect(assign?.wall).toBeGreaterThan(floor);
    expect(assign?.wall).toBeGreaterThan(lastPrinted.lastMinted);
    expect(states).toContain('waiting-for-floor');
    const waited = (assign?.mono ?? 0) - killedMono;
    console.log(
      `takeover after SIGKILL: next holder minting ${waited.toFixed(0)} ms after the kill ` +
        `(lease expiry + floor wait; floor = last-ms ${record.ms} + ${TTL_MS} + 10 = ${floor}, ` +
        `${floor - killedWall} ms after the kill on the wall clock; assigned at wall ${assign?.wall ?? 0})`,
    );
  });

  it('20 child processes race for 5 slots: exactly 5 win', async () => {
    const prefix = uniquePrefix('race-procs');
    await bindRegion(etcd, 2, prefix, { ttlCeilingSeconds: 20 });
    // A long TTL here: 20 processes loading at once on 2 cores can starve a winner's keep-alives, and a
    // winner that fences gives its slot up (correctly), which would let a sixth process win.
    const raceOptions = (i: number): EtcdLeaseOptions => ({
      ...options(prefix, '20-24', `proc-${i}`),
      ttlSeconds: 20,
      keepAliveIntervalMs: 1000,
      keepAliveTimeoutMs: 900,
      requestTimeoutMs: 5000,
    });
    const procs = Array.from({ length: 20 }, (_, i) => child(raceOptions(i)));
    const outcomes = await Promise.all(procs.map((p) => event(p, /"event":"(alive|no-free-worker|error)"/, 90_000)));
    const winners = outcomes.filter((o) => o.event === 'alive');
    const losers = outcomes.filter((o) => o.event === 'no-free-worker');
    expect(winners).toHaveLength(5);
    expect(losers).toHaveLength(15);
    expect(winners.map((w) => w['worker']).sort()).toEqual([20, 21, 22, 23, 24]);
    for (const l of losers) expect(l['message']).toMatch(/all 5 slots/);
    for (const p of procs) expect(p.lines.filter((l) => l.includes('"unassigned"'))).toEqual([]);
    const uptimes = winners.map((w) => w['uptimeMs'] as number).sort((a, b) => a - b);
    console.log(
      `20 processes at once on 2 cores: winners mint-ready ${uptimes.map((u) => u.toFixed(0)).join(', ')} ms after their start`,
    );
    // clean shutdown of the winners: SIGTERM → release
    const alive = procs.filter((_, i) => outcomes[i]?.event === 'alive');
    await Promise.all(alive.map((p) => p.stop(10_000)));
    for (const p of alive) expect(p.lines.some((l) => l.includes('"released"'))).toBe(true);
    for (let w = 20; w <= 24; w++) {
      expect(parseLastMsRecord('k', (await kv.get(leaseKeys.lastMs(prefix, 2, w)).string()) ?? '').released).toBe(true);
    }
  });

  it('sessions that end while their claim is out leave nothing behind: after release() the process ends by itself', async () => {
    // A session fenced (or released) while its claim transaction was out used to get its worker-key watch after
    // its end, which is what cancels that watch: never cancelled, etcd3 reconnected it on a timer for ever once
    // the client was closed, and the process never ended (jest "did not exit" after root-of-trust.spec.ts on a
    // loaded machine, its leaked watch on that spec's worker key).
    const prefix = uniquePrefix('mid-claim');
    await bindRegion(etcd, 2, prefix, { ttlCeilingSeconds: TTL_MS / 1000 });
    const p = spawnProcess(process.execPath, tsNodeArgs(RELEASE_MID_CLAIM), {
      env: { ...process.env, IDGEN_TEST_ETCD: etcd.clientUrl, IDGEN_TEST_PREFIX: prefix },
    });
    await p.waitForLine(/"event":"claim-failed"/, 60_000);
    await p.waitForLine(/"event":"released"/, 60_000);
    // Nothing ends it but the end of its work. The bound only turns a hang into a message; it ends within
    // milliseconds of the line above when nothing is left running.
    let timer: NodeJS.Timeout | undefined;
    const ended = await Promise.race([
      p.exited,
      new Promise<'still running'>((r) => (timer = setTimeout(() => r('still running'), 30_000))),
    ]);
    clearTimeout(timer);
    expect(ended).toEqual({ code: 0, signal: null });
    expect(p.lines.filter((l) => l.includes('"assigned"'))).toEqual([]);
  });
});
