import { Code, ConnectError, createClient, createRouterTransport } from '@connectrpc/connect';
import { createGuardedMinter, type GuardedMinter } from '@idgen/clock-guard';
import { createTestClock, type TestClock } from '@idgen/clock-guard/testing';
import { DEFAULT_LAYOUT } from '@idgen/core';
import {
  ClockState,
  FenceReason,
  Health,
  HealthCheckResponse_ServingStatus,
  IdGenerator,
  LeaseMode,
  NodeState,
  ReadinessReason,
} from '@idgen/proto';
import { judgeReadiness, type LeaseTrouble, type Phase } from './readiness.js';
import {
  FENCE_REASON_HEADER,
  READINESS_HEADERS,
  createHealthService,
  createIdGeneratorService,
  createNextIds,
  type LeaseView,
} from './service.js';

const REGION = 2;
const WORKER = 17;

interface Fixture {
  clock: TestClock;
  guard: GuardedMinter;
  setPhase(p: Phase): void;
  setLeaseTrouble(t: LeaseTrouble | undefined): void;
  ids: ReturnType<typeof createClient<typeof IdGenerator>>;
  health: ReturnType<typeof createClient<typeof Health>>;
}

let fixture: Fixture | undefined;
afterEach(() => fixture?.guard.close());

// The real guard on a test clock, the real handlers, an in-memory Connect transport (real serialization).
function setup(options: { maxCount?: number; timeSourceMode?: 'chrony' | 'none' } = {}): Fixture {
  const clock = createTestClock();
  const guard = createGuardedMinter({ region: REGION, clock, checkIntervalMs: 0 });
  let phase: Phase = 'starting';
  let leaseTrouble: LeaseTrouble | undefined;
  const lease: LeaseView = {
    nodeId: 'node-1',
    leaseId: '7587',
    keepAliveAgeSeconds: 0.5,
    deadlineInMs: 4500,
    mode: 'etcd',
  };
  const deps = {
    guard,
    lease: () => lease,
    phase: () => phase,
    region: REGION,
    maxCount: options.maxCount ?? 4096,
    timeSourceMode: options.timeSourceMode ?? ('chrony' as const),
    advertise: () => '10.0.0.1:8080',
    // The real judgement on the real guard; the lease is alive once the guard holds a slot.
    readiness: () => {
      const g = guard.status();
      const alive = g.worker !== undefined;
      return judgeReadiness({
        phase,
        canMint: guard.canMint(),
        guard: g,
        timeSourceMode: options.timeSourceMode ?? 'chrony',
        timeSource: g.timeSource,
        lease: {
          state: alive ? 'alive' : 'claiming',
          message: alive ? `holding worker ${WORKER}` : 'claiming a worker slot',
          floorMs: alive ? g.floorMs : undefined,
        },
        leaseTrouble,
        nowMs: clock.nowMs(),
      });
    },
  };
  const transport = createRouterTransport((router) => {
    router.service(IdGenerator, createIdGeneratorService(deps));
    router.service(Health, createHealthService(deps.readiness));
  });
  fixture = {
    clock,
    guard,
    setPhase: (p) => {
      phase = p;
    },
    setLeaseTrouble: (t) => {
      leaseTrouble = t;
    },
    ids: createClient(IdGenerator, transport),
    health: createClient(Health, transport),
  };
  return fixture;
}

function assign(f: Fixture): void {
  f.guard.assign({
    region: REGION,
    worker: WORKER,
    floorMs: f.clock.nowMs() - 1,
    deadlineMonoMs: f.clock.monoMs() + 5000,
    ceilingMs: f.clock.nowMs() + 5000,
  });
  f.setPhase('running');
}

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (e) {
    return ConnectError.from(e);
  }
  throw new Error('expected the call to fail');
}

describe('NextIds', () => {
  it('returns `count` IDs as blocks of consecutive integers in the guard’s slot', async () => {
    const f = setup();
    assign(f);
    const res = await f.ids.nextIds({ count: 5 });
    expect(res.blocks).toHaveLength(1);
    const block = res.blocks[0];
    expect(block?.count).toBe(5);
    const fields = DEFAULT_LAYOUT.decompose(block?.first ?? 0n);
    expect(fields).toMatchObject({
      region: REGION,
      worker: WORKER,
      sequence: 0,
      timestampMs: f.clock.nowMs() - DEFAULT_LAYOUT.epochMs,
    });
    f.clock.advance(1);
    const next = await f.ids.nextIds({ count: 4096 });
    expect(next.blocks.reduce((n, b) => n + b.count, 0)).toBe(4096);
    expect((next.blocks[0]?.first ?? 0n) > (block?.first ?? 0n) + 4n).toBe(true);
  });

  it.each([0, 4097, 2 ** 32 - 1])('rejects count %i with INVALID_ARGUMENT naming the range', async (count) => {
    const f = setup();
    assign(f);
    const e = await failure(f.ids.nextIds({ count }));
    expect(e.code).toBe(Code.InvalidArgument);
    expect(e.rawMessage).toBe(`count must be from 1 to 4096, got ${count}`);
  });

  it('rejects a request whose caller went away with CANCELED, and does not report it as unexpected', async () => {
    const f = setup();
    assign(f);
    const unexpected: unknown[] = [];
    const nextIds = createNextIds({ guard: f.guard, maxCount: 4096, onUnexpected: (e) => unexpected.push(e) });
    void nextIds(4096); // spends this millisecond: the next request waits for a later one
    let gone = false;
    const waiting = nextIds(10, {}, () => gone);
    expect(waiting).toBeInstanceOf(Promise);
    gone = true;
    f.clock.advance(1);
    const e = await failure(Promise.resolve(waiting));
    expect(e.code).toBe(Code.Canceled);
    expect(unexpected).toEqual([]);
  });

  it('honours a configured maximum', async () => {
    const f = setup({ maxCount: 10 });
    assign(f);
    expect((await failure(f.ids.nextIds({ count: 11 }))).rawMessage).toBe('count must be from 1 to 10, got 11');
    expect((await f.ids.nextIds({ count: 10 })).blocks[0]?.count).toBe(10);
  });

  it('answers UNAVAILABLE with the fence reason before a slot is assigned, after the deadline, and while draining', async () => {
    const f = setup();
    const notAssigned = await failure(f.ids.nextIds({ count: 1 }));
    expect(notAssigned.code).toBe(Code.Unavailable);
    expect(notAssigned.metadata.get(FENCE_REASON_HEADER)).toBe('not-assigned');
    expect(notAssigned.rawMessage).toMatch(/^fenced \(not-assigned\): /);

    assign(f);
    await f.ids.nextIds({ count: 1 });
    // The lease deadline passes without a keep-alive (docs/design.md §5: fence before etcd can expire the lease).
    f.clock.advance(5000);
    const lease = await failure(f.ids.nextIds({ count: 1 }));
    expect(lease.code).toBe(Code.Unavailable);
    expect(lease.metadata.get(FENCE_REASON_HEADER)).toBe('lease');

    f.guard.extend({ deadlineMonoMs: f.clock.monoMs() + 5000, ceilingMs: f.clock.nowMs() + 5000 });
    f.clock.advance(1);
    await f.ids.nextIds({ count: 1 });
    f.guard.drain();
    f.setPhase('draining');
    expect((await failure(f.ids.nextIds({ count: 1 }))).metadata.get(FENCE_REASON_HEADER)).toBe('draining');
  });
});

describe('GetStatus', () => {
  it('says starting, then serving, then fenced, then draining, with the fence reason', async () => {
    const f = setup();
    const starting = await f.ids.getStatus({});
    expect(starting).toMatchObject({
      state: NodeState.STARTING,
      fenceReason: FenceReason.NOT_ASSIGNED,
      region: REGION,
    });
    expect(starting.worker).toBeUndefined();

    assign(f);
    await f.ids.nextIds({ count: 3 });
    const serving = await f.ids.getStatus({});
    expect(serving).toMatchObject({
      region: REGION,
      worker: WORKER,
      nodeId: 'node-1',
      state: NodeState.SERVING,
      fenceReason: FenceReason.UNSPECIFIED,
      fenceMessage: '',
      leaseId: '7587',
      keepAliveAgeSeconds: 0.5,
      fenceDeadlineInMs: 4500n,
      leaseMode: LeaseMode.ETCD,
      clockState: ClockState.HEALTHY,
      lastMintedMs: BigInt(f.clock.nowMs()),
      advertiseAddress: '10.0.0.1:8080',
      maxCount: 4096,
      layout: {
        epochMs: BigInt(DEFAULT_LAYOUT.epochMs),
        timestampBits: 41,
        regionBits: 3,
        workerBits: 7,
        sequenceBits: 12,
      },
    });

    f.guard.setTimeSource(false, 'chrony is not synchronised', 0.5);
    const fenced = await f.ids.getStatus({});
    expect(fenced).toMatchObject({
      state: NodeState.FENCED,
      fenceReason: FenceReason.TIME_SOURCE,
      clockState: ClockState.UNHEALTHY,
      clockOffsetSeconds: 0.5,
    });
    expect(fenced.fenceMessage).toContain('chrony is not synchronised');

    f.guard.drain();
    f.setPhase('draining');
    expect(await f.ids.getStatus({})).toMatchObject({ state: NodeState.DRAINING, fenceReason: FenceReason.DRAINING });
  });

  it('says why it is not ready in fields 19-23: etcd unreachable, ready, fenced with the fence reason', async () => {
    const f = setup();
    f.setLeaseTrouble({
      reason: 'etcd-unreachable',
      detail: 'layout check failed (connect ECONNREFUSED); retrying in 500 ms',
    });
    expect(await f.ids.getStatus({})).toMatchObject({
      ready: false,
      readinessReason: ReadinessReason.ETCD_UNREACHABLE,
      readinessCause: '',
      readinessDetail: 'layout check failed (connect ECONNREFUSED); retrying in 500 ms',
    });
    f.setLeaseTrouble(undefined);
    assign(f);
    expect(await f.ids.getStatus({})).toMatchObject({
      ready: true,
      readinessReason: ReadinessReason.READY,
      readinessDetail: `holding worker ${WORKER}`,
    });
    f.clock.advance(5000);
    const fenced = await f.ids.getStatus({});
    expect(fenced).toMatchObject({ ready: false, readinessReason: ReadinessReason.FENCED, readinessCause: 'lease' });
    expect(fenced.readinessWaitMs).toBeUndefined();
  });

  it('reports the clock as unchecked with --time-source none', async () => {
    const f = setup({ timeSourceMode: 'none' });
    expect((await f.ids.getStatus({})).clockState).toBe(ClockState.UNCHECKED);
  });
});

describe('grpc.health.v1 Check', () => {
  it('is SERVING only while the node may mint, NOT_FOUND for services it does not serve', async () => {
    const f = setup();
    expect((await f.health.check({ service: '' })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    assign(f);
    expect((await f.health.check({ service: '' })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await f.health.check({ service: 'idgen.v1.IdGenerator' })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    expect((await failure(f.health.check({ service: 'other.v1.Thing' }))).code).toBe(Code.NotFound);
    expect((await f.health.list({})).statuses['']?.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    f.clock.advance(6000);
    expect((await f.health.check({ service: '' })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
  });

  it('says why in its response headers', async () => {
    const f = setup();
    const headers = async (): Promise<Headers> => {
      let h: Headers | undefined;
      await f.health.check({ service: '' }, { onHeader: (received) => (h = received) });
      if (h === undefined) throw new Error('no response headers');
      return h;
    };
    f.setLeaseTrouble({
      reason: 'waiting-for-slot',
      detail: 'no free worker slot: all 1 slot this node may claim are held (1 held: 2/0: node-a — é)',
    });
    const spare = await headers();
    expect(spare.get(READINESS_HEADERS.reason)).toBe('waiting-for-slot');
    expect(spare.get(READINESS_HEADERS.cause)).toBeNull();
    expect(spare.get(READINESS_HEADERS.detail)).toBe(
      'no free worker slot: all 1 slot this node may claim are held (1 held: 2/0: node-a ? ?)',
    );
    f.setLeaseTrouble(undefined);
    assign(f);
    f.guard.setTimeSource(false, 'chrony is not synchronised (leap status Not synchronised)');
    const unsynchronised = await headers();
    expect(unsynchronised.get(READINESS_HEADERS.reason)).toBe('time-source-unavailable');
    expect(unsynchronised.get(READINESS_HEADERS.detail)).toBe(
      'chrony is not synchronised (leap status Not synchronised)',
    );
    f.guard.setTimeSource(true, 'synchronised');
    f.clock.advance(6000);
    const fenced = await headers();
    expect(fenced.get(READINESS_HEADERS.reason)).toBe('fenced');
    expect(fenced.get(READINESS_HEADERS.cause)).toBe('lease');
  });
});
