import crypto from 'node:crypto';
import FakeTimers from '@sinonjs/fake-timers';
import fc from 'fast-check';
import { runScenario, seeded, type Fault, type RunReport, type Scenario, type Ticker } from './deployment.js';

/**
 * Runs a scenario on a fresh fake clock (`@sinonjs/fake-timers`: every timer, `Date` and `performance` of the
 * process), with `Math.random` and `crypto.randomInt` drawn from the run's seed, so a run replays exactly.
 */
export async function runSimulated(
  s: Scenario,
  seed: number,
  onProgress?: (simulatedMs: number) => void,
): Promise<RunReport> {
  return simulatedProcess(seed, onProgress, (ticker) => runScenario(s, ticker, seed));
}

/**
 * The process discipline every simulated run keeps (one region's or the whole deployment's): a fresh fake clock
 * (`@sinonjs/fake-timers`: every timer, `Date` and `performance`), `Math.random`, `crypto.randomInt` and
 * `crypto.randomUUID` drawn from the seed, and errors no code path handled counted in the report, not allowed to end
 * the process. `onProgress` hears every step of simulated time (a ScheduleRunner tells a stuck schedule from a slow
 * one by it). Everything is put back at the end.
 */
export async function simulatedProcess<R extends object>(
  seed: number,
  onProgress: ((simulatedMs: number) => void) | undefined,
  body: (ticker: Ticker) => Promise<R>,
): Promise<R & { escapedErrors: string[] }> {
  const clock = FakeTimers.install({
    now: 1_780_000_000_000,
    toFake: [
      'setTimeout',
      'clearTimeout',
      'setInterval',
      'clearInterval',
      'setImmediate',
      'clearImmediate',
      'Date',
      'performance',
    ],
    shouldClearNativeTimers: true,
  });
  const random = seeded(seed ^ 0x5bd1e995);
  const savedRandom = Math.random;
  const savedRandomInt = crypto.randomInt;
  const savedUuid = crypto.randomUUID;
  Math.random = random.next;
  (crypto as { randomInt: unknown }).randomInt = (a: number, b?: number, cb?: unknown): number => {
    const [min, max] = b === undefined || typeof b === 'function' ? [0, a] : [a, b];
    const v = min + random.int(max - min);
    if (typeof cb === 'function') (cb as (e: null, v: number) => void)(null, v);
    return v;
  };
  // The registry's deployment ID (`initRegistry`) is a random UUID: drawn from the seed too.
  (crypto as { randomUUID: unknown }).randomUUID = (): string => {
    const h = (): string => random.int(0x10000).toString(16).padStart(4, '0');
    return `${h()}${h()}-${h()}-4${h().slice(1)}-8${h().slice(1)}-${h()}${h()}${h()}`;
  };
  const escaped: string[] = [];
  const onEscape = (e: unknown): void => {
    escaped.push(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
  };
  process.on('unhandledRejection', onEscape);
  process.on('uncaughtException', onEscape);
  try {
    const t0 = clock.now;
    const ticker: Ticker =
      onProgress === undefined
        ? clock
        : {
            get now(): number {
              return clock.now;
            },
            async tickAsync(ms: number): Promise<number> {
              const r = await clock.tickAsync(ms);
              onProgress(clock.now - t0);
              return r;
            },
          };
    const report = await body(ticker);
    return { ...report, escapedErrors: escaped };
  } finally {
    process.off('unhandledRejection', onEscape);
    process.off('uncaughtException', onEscape);
    Math.random = savedRandom;
    (crypto as { randomInt: unknown }).randomInt = savedRandomInt;
    (crypto as { randomUUID: unknown }).randomUUID = savedUuid;
    clock.uninstall();
  }
}

const node = fc.integer({ min: 0, max: 7 });
const seconds = fc.integer({ min: 1, max: 20 });

/** The fault menu (deployment.ts's {@link Fault}). */
export const faultArb: fc.Arbitrary<Fault> = fc.oneof(
  fc.record({ kind: fc.constant('cut' as const), node, seconds }),
  fc.record({ kind: fc.constant('lose-answer' as const), node }),
  fc.record({ kind: fc.constant('member-down' as const), member: fc.integer({ min: 0, max: 2 }), seconds }),
  fc.record({ kind: fc.constant('slow' as const), node, ms: fc.integer({ min: 10, max: 3000 }), seconds }),
  fc.record({ kind: fc.constant('clock-step' as const), node, ms: fc.integer({ min: -5000, max: 5000 }) }),
  fc.record({ kind: fc.constant('pause' as const), node, seconds }),
  fc.record({ kind: fc.constant('snapshot' as const) }),
  fc.record(
    { kind: fc.constant('restore' as const), newCluster: fc.boolean(), operator: fc.boolean(), lost: node },
    { requiredKeys: ['kind', 'newCluster', 'operator'] },
  ),
  fc.record(
    { kind: fc.constant('rewind' as const), seconds, newCluster: fc.boolean(), operator: fc.boolean(), lost: node },
    { requiredKeys: ['kind', 'seconds', 'newCluster', 'operator'] },
  ),
  fc.record({ kind: fc.constant('crash' as const), node }),
  fc.record({ kind: fc.constant('compact' as const) }),
);

/**
 * A schedule and the seed of the network that runs it: what a fast-check run of either scenario draws (the seed
 * first, so a schedule replays the same draws from its path).
 */
export function withNetSeed<S>(scenario: fc.Arbitrary<S>): fc.Arbitrary<{ scenario: S; netSeed: number }> {
  return fc.record({ netSeed: fc.integer({ min: 0, max: 0x7fffffff }), scenario });
}

/** A scenario: a deployment's shape and a schedule of faults over `minutes` of simulated time (the random menu). */
export function scenarioArb(durationMs: number): fc.Arbitrary<{ scenario: Scenario; netSeed: number }> {
  return withNetSeed(randomScenarioArb(durationMs, fc.constant(undefined)));
}

/**
 * The stories: the late write (below), or the random menu with 1-2 embedded sources (`@idgen/embedded`) beside the
 * nodes on the same slots. The explorer draws them for one chunk seed in five (main.ts, `defaultArb`).
 */
export function storiesArb(durationMs: number): fc.Arbitrary<{ scenario: Scenario; netSeed: number }> {
  return withNetSeed(
    fc.oneof(lateWriteStory(durationMs), randomScenarioArb(durationMs, fc.integer({ min: 1, max: 2 }))),
  );
}

/** The random fault menu over a random shape, with `embedded` sources (none when it draws `undefined`). */
function randomScenarioArb(durationMs: number, embedded: fc.Arbitrary<number | undefined>): fc.Arbitrary<Scenario> {
  return fc
    .record({
      nodes: fc.integer({ min: 2, max: 5 }),
      workers: fc.integer({ min: 1, max: 3 }),
      members: fc.integer({ min: 1, max: 3 }),
      // Each node's TTL (issue 31's case 3: holders on different TTLs); the operator pins the longest as the
      // deployment's ceiling, so every node runs within it.
      nodeTtlSeconds: fc.array(fc.constantFrom(2, 3, 6, 10), { minLength: 1, maxLength: 3 }),
      durationMs: fc.constant(durationMs),
      lostAnswerPerMille: fc.constantFrom(0, 0, 5, 50),
      faults: fc.array(fc.record({ atMs: fc.integer({ min: 0, max: durationMs }), fault: faultArb }), {
        maxLength: 25,
      }),
      embedded,
    })
    .map(({ embedded: e, ...r }) => withTtls(e === undefined ? r : { ...r, embedded: e }));
}

/** The default TTL (what the operator types for `region restored`) is the shortest; the ceiling the longest. */
function withTtls<R extends { nodeTtlSeconds: number[] }>(r: R): R & { ttlSeconds: number; ttlCeilingSeconds: number } {
  return { ...r, ttlSeconds: Math.min(...r.nodeTtlSeconds), ttlCeilingSeconds: Math.max(...r.nodeTtlSeconds) };
}

/**
 * A story, the first review's unordered writes: a holder's wall clock steps ahead by more than a successor's start
 * hold (TTL + margin + bound, on a short TTL) while the link to the member it writes to turns slow past the write's
 * deadline. A `last-ms` write from before the step lands there after the newer ones the holder asked again of the next
 * member, and the holder is paused past its lease: its successor then reads the older `last-ms`, and only the compare
 * on the record's mod revision keeps the late write from landing (the start hold alone does not reach a clock that
 * far ahead). The holder is one node (`h`) of one worker; the rest of the schedule is random.
 */
function lateWriteStory(durationMs: number): fc.Arbitrary<Scenario> {
  const shape = fc.record({
    nodes: fc.constantFrom(2, 2, 3),
    members: fc.constantFrom(2, 2, 3),
    ttl: fc.constantFrom(2, 2, 3),
    h: fc.integer({ min: 0, max: 2 }),
    atMs: fc.integer({ min: 3000, max: Math.max(3000, durationMs / 3) }),
    aheadMs: fc.integer({ min: 3500, max: 5000 }),
    // A holder's route starts on the first endpoint.
    member: fc.constantFrom(0, 0, 0, 1),
    slowMs: fc.integer({ min: 2500, max: 3000 }),
    stepAfterMs: fc.integer({ min: 0, max: 1000 }),
    pauseAfterMs: fc.integer({ min: 1500, max: 3500 }),
    pauseSeconds: fc.integer({ min: 6, max: 15 }),
    rest: fc.array(fc.record({ atMs: fc.integer({ min: 0, max: durationMs }), fault: faultArb }), { maxLength: 4 }),
  });
  return shape.map((x) => {
    const at = (ms: number): number => Math.min(durationMs, Math.max(0, ms));
    const h = x.h % x.nodes;
    const story: { atMs: number; fault: Fault }[] = [
      { atMs: x.atMs, fault: { kind: 'slow', node: h, ms: x.slowMs, seconds: 5, member: x.member } },
      { atMs: at(x.atMs + x.stepAfterMs), fault: { kind: 'clock-step', node: h, ms: x.aheadMs } },
      { atMs: at(x.atMs + x.pauseAfterMs), fault: { kind: 'pause', node: h, seconds: x.pauseSeconds } },
    ];
    return withTtls({
      nodes: x.nodes,
      workers: 1,
      members: x.members,
      nodeTtlSeconds: [x.ttl],
      durationMs,
      lostAnswerPerMille: 0,
      faults: [...story, ...x.rest],
    });
  });
}
