import { performance } from 'node:perf_hooks';
import { isIdsUnavailableError as clientIsIdsUnavailableError, type IdClient } from '@idgen/client';
import type { ClockSource } from '@idgen/clock-guard';
import { DEFAULT_LAYOUT, createLayout } from '@idgen/core';
import { LeaseConfigError } from '@idgen/lease';
import { leaseKeys, parseLastMsRecord } from '@idgen/lease/records';
import {
  QUICK_LEASE_SETTINGS,
  bindRegion,
  cleanupAll,
  createTcpProxy,
  startEtcd,
  type EtcdServer,
} from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import {
  IdsUnavailableError,
  RangeFullError,
  createEmbeddedIdSource,
  isIdClientError,
  isIdsUnavailableError,
  type EmbeddedIdSource,
  type EmbeddedIdSourceOptions,
  type UnavailableReason,
} from '../src/index.js';

// The embedded mode against a real etcd (docs/design.md §5, §7): the same lease and guard as a node, in this
// process. Only the wall-ceiling case injects a clock: a VM's wall clock stepped ahead cannot be driven for real.
jest.setTimeout(120_000);

let etcd: EtcdServer;
let kv: Etcd3;
let counter = 0;
const sources: EmbeddedIdSource[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
  kv = new Etcd3({ hosts: [etcd.clientUrl] });
});

afterEach(async () => {
  await Promise.all(sources.splice(0).map((s) => s.close()));
  for (const c of cleanups.splice(0).reverse()) await c();
});

afterAll(async () => {
  kv?.close();
  await cleanupAll();
});

/** A fresh prefix, bound to region 2 (every source here is region 2's) as idgen region init does before the first one. */
async function prefix(name: string): Promise<string> {
  counter += 1;
  const p = `/idgen-embedded/${name}-${process.pid}-${counter}`;
  await bindRegion(etcd, 2, p);
  return p;
}

/** A source on quick lease settings (QUICK_LEASE_SETTINGS: TTL 2 s); the rules checked are about order, not speed. */
function source(p: string, extra: Partial<EmbeddedIdSourceOptions> = {}): EmbeddedIdSource {
  const s = createEmbeddedIdSource({
    etcd: { endpoints: [etcd.clientUrl], prefix: p },
    region: 2,
    timeSource: 'none',
    ...QUICK_LEASE_SETTINGS,
    ...extra,
  });
  sources.push(s);
  return s;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits (bounded) for a condition; the bound is a hang guard, not a timing assertion. */
async function until(what: string, cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

async function keys(p: string): Promise<Record<string, string>> {
  return kv.getAll().prefix(`${p}/`).strings();
}

describe('minting in-process', () => {
  it('takes a slot of the embedded range (18-127 by default), records kind embedded, registers nowhere, and every call yields unique IDs', async () => {
    const p = await prefix('basic');
    // One slot throughout (the checks below name it): a fence after 4 s without a keep-alive, not 1.5 s, which a run
    // at load 60-100 reached, and the source then minted on from a second slot.
    const steady = { ttlSeconds: 5, keepAliveIntervalMs: 1000, keepAliveTimeoutMs: 900, fenceMarginMs: 1000 };
    const s = source(p, { nodeId: 'orders-7', ...steady });
    await s.ready();
    const ids = [
      s.nextIdSync(),
      BigInt(s.nextIdStringSync()),
      ...s.nextIdsSync(5000), // more than one millisecond's 4,096
      await s.nextId(),
      BigInt(await s.nextIdString()),
      ...(await s.nextIds(9000)),
      s.tryNextId() as bigint,
    ];
    expect(ids).toHaveLength(14_005);
    expect(new Set(ids).size).toBe(ids.length);
    const sorted = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    expect(sorted).toEqual(ids); // handed out in increasing order
    const fields = ids.map((id) => DEFAULT_LAYOUT.decompose(id));
    expect(new Set(fields.map((f) => f.region))).toEqual(new Set([2]));
    const worker = s.status().worker as number;
    expect(new Set(fields.map((f) => f.worker))).toEqual(new Set([worker]));
    expect(worker).toBeGreaterThanOrEqual(18);
    expect(worker).toBeLessThanOrEqual(127);

    const all = await keys(p);
    expect(JSON.parse(all[leaseKeys.worker(p, 2, worker)] ?? '{}')).toMatchObject({
      nodeId: 'orders-7',
      kind: 'embedded',
      address: '',
    });
    expect(Object.keys(all).filter((k) => k.includes('/nodes/'))).toEqual([]); // no serving address, no discovery record
    expect(s.status()).toMatchObject({
      state: 'running',
      region: 2,
      workers: { first: 18, last: 127 },
      canMint: true,
      minted: 14_005,
    });
  });

  it("has the client's calls: code written against IdClient takes an embedded source, and the client's guards know its errors", async () => {
    const s = source(await prefix('shape'), { workers: '0' });
    type Common = Pick<IdClient, 'nextId' | 'nextIds' | 'nextIdString' | 'tryNextId' | 'close'>;
    const asClient: Common = s; // compile-time: the same names and signatures
    await s.ready();
    expect(typeof (await asClient.nextId())).toBe('bigint');
    await s.close();
    const afterClose = await asClient.nextId().catch((e: unknown) => e);
    expect(isIdClientError(afterClose)).toBe(true);
    expect((afterClose as IdsUnavailableError).code).toBe('closed');

    const fenced = new IdsUnavailableError('no ID: lease: …', { reason: 'lease', waitedMs: 5 });
    expect(clientIsIdsUnavailableError(fenced)).toBe(true);
    expect(fenced.attempts).toEqual([]);
    expect(fenced).toMatchObject({ code: 'ids-unavailable', retryable: true, reason: 'lease', waitedMs: 5 });
  });

  it('checks its options before any I/O', () => {
    const base = { etcd: { endpoints: [etcd.clientUrl] }, timeSource: 'none' as const };
    expect(() => createEmbeddedIdSource({ ...base, region: 8 })).toThrow(RangeError);
    expect(() => createEmbeddedIdSource({ ...base, region: 2, workers: '18-128' })).toThrow(LeaseConfigError);
    expect(() => createEmbeddedIdSource({ ...base, region: 2, ttlSeconds: 1 })).toThrow(/ttlSeconds/);
    expect(() => createEmbeddedIdSource({ ...base, region: 2, deadlineMs: 0 })).toThrow(/deadlineMs/);
    expect(() => createEmbeddedIdSource({ etcd: { endpoints: ['etcd:2379'] }, region: 2, timeSource: 'none' })).toThrow(
      /etcd client URL/,
    );
  });

  it('derives the keep-alive interval from a short TTL as the server does (a third, at most 2 s)', async () => {
    const s = source(await prefix('ttl3'), {
      ttlSeconds: 3,
      keepAliveIntervalMs: undefined,
      keepAliveTimeoutMs: undefined,
      fenceMarginMs: undefined,
    });
    await s.ready();
    expect(typeof s.nextIdSync()).toBe('bigint');
  });
});

describe('refusing rather than guessing', () => {
  it('before a slot is assigned: the sync call throws IdsUnavailableError at once, the async one waits for the slot', async () => {
    const p = await prefix('waiting');
    const first = source(p, { workers: '40' });
    await first.ready();
    const firstIds = first.nextIdsSync(100);

    const second = source(p, { workers: '40', slotWaitMs: 60_000 });
    await until('the second source to wait for the slot', () => second.status().state === 'waiting-for-slot');
    const e = caught(() => second.nextIdSync());
    expect(isIdsUnavailableError(e)).toBe(true);
    expect(e).toMatchObject({ code: 'ids-unavailable', reason: 'not-assigned' });
    // The guard types `reason` as the source's own (this line does not compile against core's untyped guard).
    const reason: UnavailableReason | undefined = isIdsUnavailableError(e) ? e.reason : undefined;
    expect(reason).toBe('not-assigned');
    expect(second.tryNextId()).toBeUndefined();
    const short = await second.nextId({ deadlineMs: 50 }).catch((x: unknown) => x);
    expect(short).toMatchObject({ code: 'ids-unavailable', reason: 'not-assigned' });

    const waiting = second.nextIds(10, { deadlineMs: 60_000 });
    await first.close(); // the slot frees up, released cleanly with its last millisecond
    const got = await waiting;
    expect(got.every((id) => DEFAULT_LAYOUT.decompose(id).worker === 40)).toBe(true);
    const lastOfFirst = firstIds[firstIds.length - 1] as bigint;
    expect(got.every((id) => id > lastOfFirst)).toBe(true); // above the released last-ms: never the same millisecond
  });

  it('a full range waits slotWaitMs, then says which range and how many hold it; a slot freed meanwhile is taken', async () => {
    const p = await prefix('full');
    const a = source(p, { workers: '41-42' });
    const b = source(p, { workers: '41-42' });
    await Promise.all([a.ready(), b.ready()]);

    const c = source(p, { workers: '41-42', slotWaitMs: 1500 });
    const err = await c.ready().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RangeFullError);
    expect(err).toMatchObject({
      code: 'ids-unavailable',
      reason: 'range-full',
      region: 2,
      range: { first: 41, last: 42 },
      holders: 2,
    });
    expect((err as Error).message).toMatch(
      /no free worker slot in region 2's range 41-42 \(2 slots\): 2 held by other holders, still after waiting \d+ ms \(slotWaitMs 1500\)/,
    );
    expect(await c.nextId().catch((e: unknown) => e)).toBe(err);
    expect(caught(() => c.nextIdSync())).toBe(err);
    expect(c.status()).toMatchObject({ state: 'failed', failure: (err as Error).message });

    const d = source(p, { workers: '41-42', slotWaitMs: 60_000 });
    await until('d to wait', () => d.status().state === 'waiting-for-slot');
    await b.close();
    await d.ready();
    expect([41, 42]).toContain(d.status().worker);
  });

  it("a layout that differs from etcd's stops the start for good (not retryable)", async () => {
    const p = await prefix('layout');
    const a = source(p, { workers: '3' });
    await a.ready();
    const other = createLayout({ epochMs: 0, timestampBits: 41, regionBits: 3, workerBits: 7, sequenceBits: 12 });
    const b = source(p, { workers: '4', layout: other });
    const err = await b.ready().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ids-unavailable', reason: 'start-failed', retryable: false });
    expect((err as Error).message).toMatch(/differs from this process's/);
  });

  it("an etcd bound to another region's code stops the start for good (not retryable) and claims nothing", async () => {
    counter += 1;
    const p = `/idgen-embedded/other-region-${process.pid}-${counter}`;
    await bindRegion(etcd, 3, p); // region 3's etcd; the source says region 2
    const s = source(p);
    const err = await s.ready().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ids-unavailable', reason: 'start-failed', retryable: false });
    expect((err as Error).message).toMatch(/this etcd serves region 3 .*, not region 2/);
    expect(Object.keys(await keys(p)).filter((k) => k.includes('/workers/'))).toEqual([]);
  });

  it('with the time-source check on and no working chronyc it claims nothing and mints nothing', async () => {
    const p = await prefix('chrony');
    const s = source(p, { timeSource: 'chrony', chronycPath: '/nonexistent/chronyc', timeSourceRetryMs: 100 });
    await until('the source to wait for its time source', () => s.status().state === 'waiting-for-time-source');
    expect(caught(() => s.nextIdSync())).toMatchObject({ code: 'ids-unavailable' });
    const e = await s.nextId({ deadlineMs: 300 }).catch((x: unknown) => x);
    expect(isIdsUnavailableError(e)).toBe(true);
    expect(s.status().guard.timeSource).toMatchObject({ healthy: false });
    expect(s.status().guard.timeSource.message).toMatch(/not found/);
    expect(Object.keys(await keys(p)).filter((k) => k.includes('/workers/'))).toEqual([]);
  });

  it('fences when etcd stops answering (the lease deadline): sync refuses at once, async waits, both resume after, no duplicate', async () => {
    const own = await startEtcd();
    cleanups.push(() => own.stop());
    await bindRegion(own, 2); // the default prefix, /idgen
    const s = createEmbeddedIdSource({
      etcd: { endpoints: [own.clientUrl] },
      region: 2,
      timeSource: 'none',
      ...QUICK_LEASE_SETTINGS,
      requestTimeoutMs: 1000,
    });
    sources.push(s);
    await s.ready();
    const ids: bigint[] = s.nextIdsSync(1000);
    own.pause();
    let refusal: unknown;
    await until('the source to fence', () => {
      try {
        ids.push(s.nextIdSync());
        return false;
      } catch (e) {
        refusal = e;
        return true;
      }
    });
    expect(refusal).toMatchObject({ code: 'ids-unavailable', reason: 'lease' });
    const waited = await s.nextId({ deadlineMs: 200 }).catch((e: unknown) => e);
    expect(waited).toMatchObject({ code: 'ids-unavailable', reason: 'lease' });
    expect((waited as IdsUnavailableError).waitedMs).toBeGreaterThan(0);

    const later = s.nextIds(100, { deadlineMs: 60_000 });
    own.resume();
    ids.push(...(await later), s.nextIdSync());
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('never mints above the wall ceiling: a wall clock stepped ahead while cut off from etcd fences clock-ahead before the deadline', async () => {
    const proxy = await createTcpProxy({ target: new URL(etcd.clientUrl).host });
    cleanups.push(() => proxy.close());
    let wallOffset = 0;
    const clock: ClockSource = { nowMs: () => Date.now() + wallOffset, monoMs: () => performance.now() };
    const p = await prefix('ceiling');
    const s = source(p, {
      etcd: { endpoints: [`http://${proxy.address}`], prefix: p },
      clock,
      ttlSeconds: 6, // a long monotonic deadline: only the ceiling can stop it
      keepAliveIntervalMs: 1000,
      keepAliveTimeoutMs: 500,
      fenceMarginMs: 1000,
    });
    await s.ready();
    const before = s.nextIdSync();
    proxy.cut('blackhole');
    wallOffset = 8000; // the wall clock jumps ahead of the monotonic one (a VM resumed, a step)
    const e = caught(() => s.nextIdSync());
    expect(e).toMatchObject({ code: 'ids-unavailable', reason: 'clock-ahead' });
    expect(s.status().lease.deadlineInMs).toBeGreaterThan(0); // the monotonic deadline alone would have minted
    expect(s.status().guard.ceilingMs).toBeLessThan(Date.now() + wallOffset);
    expect(DEFAULT_LAYOUT.decompose(before).region).toBe(2);
    proxy.restore();
  });
});

describe('close', () => {
  it('writes the final last-ms marked released at or above the last ID, rejects waiting and later calls with code closed', async () => {
    const p = await prefix('close');
    const s = source(p, { workers: '77' });
    await s.ready();
    const ids = s.nextIdsSync(5000);
    const lastMs = DEFAULT_LAYOUT.decompose(ids[ids.length - 1] as bigint).timestampMs + DEFAULT_LAYOUT.epochMs;
    await s.close();
    const raw = await kv.get(leaseKeys.lastMs(p, 2, 77)).string();
    const record = parseLastMsRecord(leaseKeys.lastMs(p, 2, 77), raw ?? '');
    expect(record.released).toBe(true);
    expect(record.ms).toBeGreaterThanOrEqual(lastMs);
    expect(await kv.get(leaseKeys.worker(p, 2, 77)).string()).toBeNull(); // revoked: the slot is free
    expect(caught(() => s.nextIdSync())).toMatchObject({ code: 'closed' });
    expect(await s.nextIds(3).catch((e: unknown) => e)).toMatchObject({ code: 'closed' });
    await s.close(); // idempotent

    const blocked = source(p, { workers: '78', slotWaitMs: 60_000 });
    const holder = source(p, { workers: '78' });
    await Promise.race([blocked.ready(), holder.ready()]);
    const [waiter, other] = blocked.status().worker === 78 ? [holder, blocked] : [blocked, holder];
    await until('the other source to wait', () => waiter.status().state === 'waiting-for-slot');
    // Caught from the start: close() rejects it at once, while close() itself still waits on etcd.
    const pending = waiter.nextId({ deadlineMs: 60_000 }).catch((e: unknown) => e);
    await waiter.close();
    const refused = await pending;
    expect(isIdClientError(refused)).toBe(true);
    expect((refused as IdsUnavailableError).code).toBe('closed');
    expect(other.status().state).toBe('running');
  });
});
