import { FAULT_KINDS, createSchedule } from '../schedule.js';
import { commonIds, idsOf, judgeEmptyState, judgeTwins, messagesOf, type EmptyStart } from './standalone.js';

const ids = (...xs: number[]): BigUint64Array => idsOf(xs.map((x) => ({ first: BigInt(x), count: 1 })));

const start = (o: Partial<EmptyStart>): EmptyStart => ({
  name: 'n',
  exitCode: 1,
  ready: false,
  ids: 0,
  equalToFirst: 0,
  stateFileLine: 'boot failed: the standalone state file /x/state.json is empty (…): refusing to guess a floor',
  unknownFlagLine: undefined,
  ...o,
});

describe('standalone faults', () => {
  it('are scheduled right after etcd-member-down, each in a window longer than its effect', () => {
    const at = FAULT_KINDS.indexOf('etcd-member-down');
    expect(FAULT_KINDS.slice(at + 1, at + 4)).toEqual([
      'standalone-pause',
      'standalone-step',
      'standalone-empty-state',
    ]);
    const s = createSchedule({
      durationMs: 200_000,
      seed: 3,
      leaseTtlMs: 3000,
      kinds: ['standalone-pause', 'standalone-step', 'standalone-empty-state'],
    });
    const pause = s.faults.find((f) => f.kind === 'standalone-pause');
    // Past the old lock's 5 s stale time: the waiter of the old code took the lock from the stopped holder.
    expect(pause?.effectMs).toBeGreaterThan(5000);
    for (const f of s.faults) expect(f.windowMs).toBeGreaterThan(f.effectMs);
  });

  it('expands blocks into sorted IDs and counts the IDs two processes both handed out', () => {
    const a = idsOf([
      { first: 10n, count: 3 },
      { first: 1n, count: 2 },
    ]);
    expect([...a]).toEqual([1n, 2n, 10n, 11n, 12n]);
    const b = idsOf([{ first: 11n, count: 5 }]);
    expect(commonIds(a, b)).toEqual({ count: 2, examples: [11n, 12n] });
    expect(commonIds(a, ids(3, 4, 5)).count).toBe(0);
    expect(commonIds(ids(7, 7, 8), ids(7)).count).toBe(1); // distinct IDs
  });

  it('is a safety violation when an ID was handed out by both processes on one state file', () => {
    expect(judgeTwins('(paused)', { name: 'a', ids: ids(1, 2, 3) }, { name: 'b', ids: ids(4, 5) })).toBeUndefined();
    expect(judgeTwins('(paused)', { name: 'a', ids: ids(1, 2, 3) }, { name: 'b', ids: ids(2, 3, 9) })).toBe(
      '2 ID(s) handed out by both a and b (paused) (e.g. 2, 3)',
    );
  });

  it('reads the servers’ log lines: a pino msg with its error, or a plain line (a flag error)', () => {
    expect(
      messagesOf([
        '{"level":60,"msg":"boot failed","err":{"message":"the standalone state file /x is empty"}}',
        '{"level":30,"msg":"ready"}',
        '{"level":30,"msg":"lease: claiming","detail":"waiting for the state file\'s lock, held by pid 12"}',
        "idgen-server: unknown option '--fresh-state' (see --help)",
      ]),
    ).toEqual([
      'boot failed: the standalone state file /x is empty',
      'ready',
      "lease: claiming: waiting for the state file's lock, held by pid 12",
      "idgen-server: unknown option '--fresh-state' (see --help)",
    ]);
  });

  it('passes an empty state file refused and a --fresh-state start that hands out none of the first run’s IDs', () => {
    const j = judgeEmptyState(
      start({ name: 'empty' }),
      start({ name: 'fresh', exitCode: undefined, ready: true, ids: 500 }),
    );
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBeUndefined();
    expect(j.notes[0]).toMatch(/^empty: exited by itself, code 1, never ready, 0 IDs/);
  });

  it('is a safety violation when a node served on the empty file, or --fresh-state repeated the first run’s IDs', () => {
    const j = judgeEmptyState(
      start({ name: 'empty', exitCode: undefined, ready: true, ids: 900, equalToFirst: 400, stateFileLine: undefined }),
      start({ name: 'fresh', exitCode: undefined, ready: true, ids: 800, equalToFirst: 300 }),
    );
    expect(j.safetyViolation).toBe(
      "empty served on an empty state file (900 IDs, 400 equal to the first run's); fresh (--fresh-state, clock behind) handed out 300 ID(s) of the first run",
    );
    expect(j.expectationMissed).toBeUndefined(); // it served: that is the finding, not how it refused
  });

  it('reports an older server without --fresh-state as part of the finding, and a refusal without its line', () => {
    const old = judgeEmptyState(
      start({ name: 'empty', exitCode: undefined, ready: true, ids: 10, equalToFirst: 10 }),
      start({ name: 'fresh', exitCode: 2, unknownFlagLine: "idgen-server: unknown option '--fresh-state'" }),
    );
    expect(old.safetyViolation).toMatch(/; --fresh-state is unknown to this server$/);
    const quiet = judgeEmptyState(
      start({ name: 'empty', exitCode: 0, stateFileLine: undefined }),
      start({ name: 'fresh', exitCode: 2, unknownFlagLine: "idgen-server: unknown option '--fresh-state'" }),
    );
    expect(quiet.safetyViolation).toBeUndefined();
    expect(quiet.expectationMissed).toBe(
      'empty did not exit non-zero on the empty state file; empty logged no line naming the state file; --fresh-state is unknown to this server',
    );
  });
});
