import { NoFreeWorkerError, type LeaseSnapshot } from '@idgen/lease';
import { ReadinessReason as WireReadinessReason } from '@idgen/proto';
import {
  READINESS_REASONS,
  classifyLeaseMessage,
  createLeaseTroubleTracker,
  describeReadiness,
  judgeReadiness,
  type ReadinessInputs,
} from './readiness.js';

const NOW = 1_790_000_000_000;

/** A node that is running and may mint; each case changes what it is about. */
function inputs(over: Partial<ReadinessInputs> = {}): ReadinessInputs {
  return {
    phase: 'running',
    canMint: true,
    guard: { reason: undefined, message: undefined, floorMs: NOW - 5000 },
    timeSourceMode: 'chrony',
    timeSource: { healthy: true, message: 'synchronised (reference ntp1, stratum 2, offset 0.012 ms)' },
    lease: { state: 'alive', message: 'holding worker 17 of region 2; minting above 1', floorMs: NOW - 5000 },
    leaseTrouble: undefined,
    nowMs: NOW,
    ...over,
  };
}

const ETCD_DOWN =
  'layout check failed (14 UNAVAILABLE: No connection established. Last error: connect ECONNREFUSED 127.0.0.1:1); retrying in 812 ms';

describe('judgeReadiness', () => {
  it.each<[string, Partial<ReadinessInputs>, Record<string, unknown>]>([
    ['a running node that may mint', {}, { ready: true, reason: 'ready' }],
    [
      'chronyc missing at boot',
      {
        phase: 'starting',
        canMint: false,
        timeSource: { healthy: false, problem: 'chronyc-missing', message: 'chronyc not found: install chrony' },
        lease: { state: 'idle', message: 'not started', floorMs: undefined },
        guard: { reason: 'not-assigned', message: 'no worker slot assigned yet', floorMs: 0 },
      },
      {
        ready: false,
        reason: 'time-source-unavailable',
        cause: 'chronyc-missing',
        detail: 'chronyc not found: install chrony',
      },
    ],
    [
      'an offset above the bound while running',
      {
        canMint: false,
        guard: { reason: 'time-source', message: 'the system clock is 25 ms off', floorMs: 0 },
        timeSource: { healthy: false, problem: 'offset-too-large', message: 'the system clock is 25 ms off' },
      },
      { ready: false, reason: 'time-source-unavailable', cause: 'offset-too-large' },
    ],
    [
      'the first chrony reading still out',
      {
        phase: 'starting',
        canMint: false,
        timeSource: { healthy: false, problem: 'not-read', message: 'not read yet' },
        lease: { state: 'idle', message: 'not started', floorMs: undefined },
      },
      { ready: false, reason: 'starting', detail: 'reading the time source' },
    ],
    [
      'etcd unreachable at boot',
      {
        phase: 'starting',
        canMint: false,
        lease: { state: 'claiming', message: 'claiming a worker slot (attempt 4)', floorMs: undefined },
        leaseTrouble: { reason: 'etcd-unreachable', detail: ETCD_DOWN },
      },
      { ready: false, reason: 'etcd-unreachable', detail: ETCD_DOWN },
    ],
    [
      'a spare waiting for a slot',
      {
        phase: 'starting',
        canMint: false,
        lease: {
          state: 'claiming',
          message: 'claim failed (no free worker slot: …); retrying in 900 ms',
          floorMs: undefined,
        },
        leaseTrouble: {
          reason: 'waiting-for-slot',
          detail: 'no free worker slot: all 1 slot this node may claim are held',
        },
      },
      { ready: false, reason: 'waiting-for-slot' },
    ],
    [
      'waiting out the previous holder’s floor',
      {
        phase: 'starting',
        canMint: false,
        lease: {
          state: 'waiting-for-floor',
          message: 'holding 2/17; previous holder ended uncleanly',
          floorMs: NOW + 4321,
        },
        guard: { reason: 'not-assigned', message: 'no worker slot assigned yet', floorMs: 0 },
      },
      {
        ready: false,
        reason: 'waiting-for-floor',
        waitMs: 4322,
        detail: 'holding 2/17; previous holder ended uncleanly',
      },
    ],
    [
      'an alive lease whose guard floor is still ahead (a restart on a clock stepped back)',
      { guard: { reason: undefined, message: undefined, floorMs: NOW + 1500 }, canMint: false },
      {
        ready: false,
        reason: 'waiting-for-floor',
        waitMs: 1501,
        detail: expect.stringContaining('has not passed the floor'),
      },
    ],
    [
      'the guard past its deadline (lease fence)',
      {
        canMint: false,
        lease: {
          state: 'fenced',
          message: 'the fence deadline passed without an acknowledged keep-alive',
          floorMs: NOW - 1,
        },
        guard: { reason: 'lease', message: 'deadline passed', floorMs: 0 },
      },
      {
        ready: false,
        reason: 'fenced',
        cause: 'lease',
        detail: 'the fence deadline passed without an acknowledged keep-alive',
      },
    ],
    [
      'a clock rollback fence on a live lease',
      { canMint: false, guard: { reason: 'clock-rollback', message: 'the clock went back 5000 ms', floorMs: 0 } },
      { ready: false, reason: 'fenced', cause: 'clock-rollback', detail: 'the clock went back 5000 ms' },
    ],
    [
      'a lost lease re-claiming against an etcd that is down',
      {
        canMint: false,
        lease: { state: 'claiming', message: 'claiming a worker slot (attempt 2)', floorMs: undefined },
        leaseTrouble: { reason: 'etcd-unreachable', detail: ETCD_DOWN },
        guard: { reason: 'not-assigned', message: 'x', floorMs: 0 },
      },
      { ready: false, reason: 'etcd-unreachable' },
    ],
    [
      'registering after the lease is alive',
      { phase: 'starting', canMint: true },
      { ready: false, reason: 'starting' },
    ],
    [
      'shutting down',
      {
        phase: 'draining',
        canMint: false,
        guard: { reason: 'draining', message: 'the node is shutting down', floorMs: 0 },
      },
      { ready: false, reason: 'draining' },
    ],
    [
      'the time source turned off (development)',
      { timeSourceMode: 'none', timeSource: { healthy: false, problem: 'not-read', message: 'not read yet' } },
      { ready: true, reason: 'ready' },
    ],
  ])('%s', (_name, over, expected) => {
    expect(judgeReadiness(inputs(over))).toMatchObject(expected);
  });
});

describe('classifyLeaseMessage and the trouble tracker', () => {
  it('reads the lease’s own words: NoFreeWorkerError, a failed etcd step, and nothing else', () => {
    const full = new NoFreeWorkerError(2, [
      { region: 2, worker: 0, holder: 'node-a' },
      { region: 2, worker: 1, holder: 'node-b' },
    ]);
    expect(classifyLeaseMessage(`claim failed (${full.message}); retrying in 1200 ms`)).toEqual({
      reason: 'waiting-for-slot',
      detail: expect.stringContaining('no free worker slot: all 2 slots this node may claim are held'),
    });
    expect(classifyLeaseMessage(ETCD_DOWN)?.reason).toBe('etcd-unreachable');
    expect(classifyLeaseMessage('claim failed (lease grant timed out after 2000 ms); retrying in 400 ms')?.reason).toBe(
      'etcd-unreachable',
    );
    expect(classifyLeaseMessage('claiming a worker slot (attempt 3)')).toBeUndefined();
    expect(classifyLeaseMessage('connecting to etcd and checking the layout record')).toBeUndefined();
  });

  it('keeps a failure through the next attempt and forgets it once a slot is held', () => {
    let listener: ((s: LeaseSnapshot) => void) | undefined;
    const tracker = createLeaseTroubleTracker({
      on: (_event, fn) => {
        listener = fn;
        return () => {
          listener = undefined;
        };
      },
    });
    const emit = (state: LeaseSnapshot['state'], message: string): void =>
      listener?.({
        state,
        message,
        nodeId: 'n',
        region: undefined,
        worker: undefined,
        leaseId: undefined,
        keepAliveAgeSeconds: undefined,
        deadlineInMs: undefined,
        floorMs: undefined,
        mode: 'etcd',
      });
    emit('claiming', 'connecting to etcd and checking the layout record');
    expect(tracker.current()).toBeUndefined();
    emit('claiming', ETCD_DOWN);
    emit('claiming', 'claiming a worker slot (attempt 2)');
    expect(tracker.current()?.reason).toBe('etcd-unreachable');
    emit('waiting-for-floor', 'holding 2/1; never used before');
    expect(tracker.current()).toBeUndefined();
    tracker.stop();
    expect(listener).toBeUndefined();
  });
});

describe('the wire enum', () => {
  it('has one value for each reason, in the same order', () => {
    const wire = READINESS_REASONS.map(
      (r) => WireReadinessReason[r.toUpperCase().replace(/-/g, '_') as keyof typeof WireReadinessReason],
    );
    expect(wire).toEqual(READINESS_REASONS.map((_r, i) => i + 1));
  });

  it('describes a readiness in one line', () => {
    expect(describeReadiness({ ready: false, reason: 'waiting-for-floor', detail: 'holding 2/17', waitMs: 1200 })).toBe(
      'waiting-for-floor, 1200 ms left: holding 2/17',
    );
    expect(describeReadiness({ ready: false, reason: 'fenced', cause: 'clock-rollback', detail: 'back 5 s' })).toBe(
      'fenced (clock-rollback): back 5 s',
    );
  });
});
