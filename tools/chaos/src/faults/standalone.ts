/**
 * Faults `standalone-pause`, `standalone-step` and `standalone-empty-state` (issue 21, cases 3, 4 and 7; item 9):
 * real `idgen-server --standalone` processes (the run's server build) on a state file of their own, each fault
 * self-contained in its window, a small puller asking every process for IDs and keeping every ID it handed out.
 * - pause: two nodes started at once on one state file, A (the one that took the lock) holds and serves, B waits; A
 *   is stopped (SIGSTOP) past the old lock's stale time (5 s), then resumed; both are asked for IDs throughout.
 * - step: A holds, B waits, and both wall clocks (one libfaketime file: the host's clock) step +10 s.
 * - empty state: a node mints and stops cleanly, its state file is truncated to 0 bytes, and a node is started on
 *   it with its clock behind that run; then again with `--fresh-state`.
 * The safety expectation of each (a failure fails the run, docs/design.md §5 "standalone holds like etcd mode"): no
 * ID handed out by two processes; a node on an empty state file never serves.
 */
import { createWriteStream } from 'node:fs';
import { mkdir, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createConnectTransport } from '@idgen/client';
import { freePort, serverLaunchArgs, spawnProcess, type ProcessExit, type ProcessHandle } from '@idgen/testing';
import type { FaultHandler } from '../fault-context.js';
import { sleep } from '../sleep.js';

/** The pre-rewrite lock's stale time (proper-lockfile, by mtime): a pause or a step past it let a waiter take over. */
export const OLD_LOCK_STALE_MS = 5_000;

/** The host-wide forward step of `standalone-step`, seconds (issue 21 case 7). */
export const STEP_SECONDS = 10;

/** IDs asked for per call, calls in flight per process, and how long one call may wait. */
const PULL_COUNT = 100;
const PULL_LOOPS = 3;
const CALL_TIMEOUT_MS = 10_000;

/** Options shared by the three faults. */
export interface StandaloneFaultOptions {
  /** The run's `idgen-server` build (`--server-main`: an old build exercises the old code). */
  readonly serverMain: string;
  readonly faketimeLib: string;
  /** The run directory: the fault's state file, clock file and logs go into `<dir>/<name>/`. */
  readonly dir: string;
  /** `standalone-pause-1` and so on. */
  readonly name: string;
  readonly region: number;
  /** The scheduled effect: the pause, the time both are pulled after the step, the first run's minting. */
  readonly effectMs: number;
  readonly signal: AbortSignal;
}

/** What one fault saw, for the record: a safety violation fails the run, an expectation missed is reported. */
export interface StandaloneOutcome {
  readonly target: string;
  readonly notes: string[];
  readonly safetyViolation: string | undefined;
  readonly expectationMissed: string | undefined;
}

/** One `idgen-server --standalone` process and what it handed out. */
export interface StandaloneNode {
  readonly name: string;
  readonly handle: ProcessHandle;
  readonly url: string;
  readonly spawnedMs: number;
  /** Every block it handed out, with the wall ms (true time) of its arrival. */
  readonly blocks: { first: bigint; count: number; receivedMs: number }[];
  failedCalls: number;
  stopPulling: (() => Promise<void>) | undefined;
  /** How it ended before the run stopped it (a refusal), if it did. */
  endedAlone: ProcessExit | undefined;
}

/** The `msg` of each JSON log line (pino) with its `detail` or error message, or the line itself (a flag error). */
export function messagesOf(lines: readonly string[]): string[] {
  return lines.map((l) => {
    try {
      const o = JSON.parse(l) as { msg?: unknown; detail?: unknown; err?: { message?: unknown } };
      const why = typeof o.err?.message === 'string' ? o.err.message : typeof o.detail === 'string' ? o.detail : '';
      return `${String(o.msg ?? '')}${why !== '' ? `: ${why}` : ''}`;
    } catch {
      return l;
    }
  });
}

/** Starts a standalone node on `stateFile` (under libfaketime reading `clockFile` when given). */
async function startNode(
  o: StandaloneFaultOptions,
  name: string,
  stateFile: string,
  clockFile: string | undefined,
  extra: readonly string[] = [],
): Promise<StandaloneNode> {
  const listen = `127.0.0.1:${await freePort()}`;
  const metrics = `127.0.0.1:${await freePort()}`;
  const handle = spawnProcess(
    process.execPath,
    [
      ...serverLaunchArgs(o.serverMain),
      '--standalone',
      '--state-file',
      stateFile,
      '--region',
      String(o.region),
      '--listen',
      listen,
      '--metrics-listen',
      metrics,
      '--time-source',
      'none',
      '--node-id',
      `chaos-${name}`,
      ...extra,
    ],
    {
      env:
        clockFile === undefined
          ? process.env
          : {
              ...process.env,
              // docs/toolchain.md "Clock faults": wall clock from the control file, monotonic clock untouched.
              LD_PRELOAD: o.faketimeLib,
              FAKETIME_TIMESTAMP_FILE: clockFile,
              FAKETIME_NO_CACHE: '1',
              DONT_FAKE_MONOTONIC: '1',
            },
      maxLines: 100_000,
    },
  );
  return {
    name,
    handle,
    url: `http://${listen}`,
    spawnedMs: Date.now(),
    blocks: [],
    failedCalls: 0,
    stopPulling: undefined,
    endedAlone: undefined,
  };
}

/**
 * Asks `node` for IDs, {@link PULL_LOOPS} calls in flight, until stopped; a refused call is counted and retried. A
 * call waits up to {@link CALL_TIMEOUT_MS}, longer than any pause: the calls a stopped node holds are answered when it
 * resumes, as a caller's would be, and what it hands out then is judged.
 */
export function pull(node: StandaloneNode, region: number, signal: AbortSignal): void {
  const transport = createConnectTransport({ url: node.url, region });
  const stop = new AbortController();
  const both = AbortSignal.any([signal, stop.signal]);
  const loop = async (): Promise<void> => {
    while (!both.aborted && node.handle.exitStatus() === undefined) {
      try {
        const call = AbortSignal.any([both, AbortSignal.timeout(CALL_TIMEOUT_MS)]);
        const blocks = await transport.nextIds(PULL_COUNT, { signal: call, timeoutMs: CALL_TIMEOUT_MS });
        const receivedMs = Date.now();
        for (const b of blocks) node.blocks.push({ first: b.first, count: b.count, receivedMs });
        // A breath between calls: the run's own fleet shares the cores (a call a ms is plenty to meet a twin).
        await sleep(1, both);
      } catch {
        if (both.aborted) break;
        node.failedCalls++;
        await sleep(25, both);
      }
    }
  };
  const loops = Array.from({ length: PULL_LOOPS }, loop);
  node.stopPulling = async () => {
    stop.abort();
    await Promise.all(loops);
    transport.close();
  };
}

/** Whether the node logged `ready` (it could mint). */
export function becameReady(node: StandaloneNode): boolean {
  return node.handle.stdoutLines.some((l) => l.includes('"msg":"ready"'));
}

/** Waits until the node is ready, has exited, or `timeoutMs` passed. */
export async function readyOrExit(node: StandaloneNode, timeoutMs: number, signal: AbortSignal): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!becameReady(node) && node.handle.exitStatus() === undefined && Date.now() < end && !signal.aborted)
    await sleep(50, signal);
}

/** Stops pulling, stops the process (SIGCONT first, then SIGTERM), and writes its log into the fault's directory. */
export async function finish(node: StandaloneNode, dir: string): Promise<void> {
  await node.stopPulling?.();
  node.endedAlone = node.handle.exitStatus();
  node.handle.signal('SIGCONT');
  const exit = node.endedAlone ?? (await node.handle.stop(5000));
  const log = createWriteStream(join(dir, `node-${node.name}.log`));
  for (const l of node.handle.lines) log.write(`${l}\n`);
  await new Promise<void>((r) => log.end(`[chaos] exited code ${exit.code} signal ${exit.signal}\n`, () => r()));
}

/** Every ID of the blocks, sorted. */
export function idsOf(blocks: readonly { first: bigint; count: number }[]): BigUint64Array {
  let n = 0;
  for (const b of blocks) n += b.count;
  const out = new BigUint64Array(n);
  let at = 0;
  for (const b of blocks) for (let i = 0; i < b.count; i++) out[at++] = b.first + BigInt(i);
  return out.sort();
}

/** How many distinct IDs both sorted arrays hold, and the first few of them. */
export function commonIds(a: BigUint64Array, b: BigUint64Array): { count: number; examples: bigint[] } {
  let i = 0;
  let j = 0;
  let count = 0;
  const examples: bigint[] = [];
  while (i < a.length && j < b.length) {
    const x = a[i] as bigint;
    const y = b[j] as bigint;
    if (x < y) i++;
    else if (y < x) j++;
    else {
      count++;
      if (examples.length < 3) examples.push(x);
      while (i < a.length && a[i] === x) i++;
      while (j < b.length && b[j] === x) j++;
    }
  }
  return { count, examples };
}

/**
 * How a process did, as one note: IDs, calls refused, ready or not, how it ended, and its last line about the state
 * file or its lock (waiting for it, refused, fenced) or a flag it does not know.
 */
function describe(node: StandaloneNode, stateFile: string): string {
  const ids = node.blocks.reduce((n, b) => n + b.count, 0);
  const said = messagesOf(node.handle.lines)
    .filter((m) => m.includes(stateFile) || /state file|unknown option/i.test(m))
    .at(-1);
  const e = node.endedAlone;
  const ended = e === undefined ? 'stopped by the run' : `exited by itself, code ${e.code ?? e.signal}`;
  return `${node.name}: ${ids.toLocaleString('en-US')} IDs handed out, ${node.failedCalls} calls refused, ${becameReady(node) ? 'was ready' : 'never ready'}, ${ended}${
    said !== undefined ? ` ("${said.slice(0, 240)}")` : ''
  }`;
}

/** The safety judgement of two processes on one state file: no ID handed out by both. */
export function judgeTwins(
  what: string,
  a: { name: string; ids: BigUint64Array },
  b: { name: string; ids: BigUint64Array },
): string | undefined {
  const common = commonIds(a.ids, b.ids);
  if (common.count === 0) return undefined;
  return `${common.count.toLocaleString('en-US')} ID(s) handed out by both ${a.name} and ${b.name} ${what} (e.g. ${common.examples.join(', ')})`;
}

/**
 * Two nodes started at once on one state file: the one that takes the lock and becomes ready is A (the holder), the
 * other B (the waiter); returns once B has reached its lease step (it judges the lock from there: every 250 ms, the
 * old code every 500 ms) and a moment more.
 */
async function startPair(
  o: StandaloneFaultOptions,
  clockFile: string | undefined,
): Promise<{ dir: string; a: StandaloneNode; b: StandaloneNode; stateFile: string; problem: string | undefined }> {
  const dir = join(o.dir, o.name);
  await mkdir(dir, { recursive: true });
  const stateFile = join(dir, 'state.json');
  const both = await Promise.all(['1', '2'].map((n) => startNode(o, `${o.name}-${n}`, stateFile, clockFile)));
  for (const node of both) pull(node, o.region, o.signal);
  const end = Date.now() + 10_000;
  while (!both.some(becameReady) && both.some((x) => x.handle.exitStatus() === undefined) && Date.now() < end)
    await sleep(50, o.signal);
  const [a, b] = (becameReady(both[1] as StandaloneNode) ? [both[1], both[0]] : both) as [
    StandaloneNode,
    StandaloneNode,
  ];
  await b.handle.waitForLine(/"msg":"boot: lease"/, 5000).catch(() => undefined);
  await sleep(300, o.signal);
  const problem = !becameReady(a)
    ? `neither ${a.name} nor ${b.name} became ready`
    : becameReady(b)
      ? `${a.name} and ${b.name} both became ready on one state file before any fault`
      : undefined;
  return { dir, a, b, stateFile, problem };
}

/** `standalone-pause`: A stopped for `effectMs` (past the old stale time), or until B serves + 1 s; then resumed. */
export async function runStandalonePause(o: StandaloneFaultOptions): Promise<StandaloneOutcome> {
  const { dir, a, b, stateFile, problem } = await startPair(o, undefined);
  const notes: string[] = [];
  const stoppedAt = Date.now();
  a.handle.signal('SIGSTOP');
  while (!becameReady(b) && Date.now() < stoppedAt + o.effectMs && !o.signal.aborted) await sleep(100, o.signal);
  const takeover = becameReady(b) ? Date.now() - stoppedAt : undefined;
  if (takeover !== undefined) await sleep(Math.min(1000, stoppedAt + o.effectMs - Date.now()), o.signal);
  const resumedAt = Date.now();
  a.handle.signal('SIGCONT');
  notes.push(
    `${a.name} stopped ${((resumedAt - stoppedAt) / 1000).toFixed(1)} s; ${b.name} ${takeover !== undefined ? `took the lock and served ${(takeover / 1000).toFixed(1)} s into the pause` : 'did not take the lock'}`,
  );
  // Both asked for IDs after the resume: what A hands out now must not be B's.
  await sleep(2000, o.signal);
  await Promise.all([finish(a, dir), finish(b, dir)]);
  const afterResume = a.blocks.filter((x) => x.receivedMs >= resumedAt).reduce((n, x) => n + x.count, 0);
  notes.push(
    describe(a, stateFile),
    `${a.name} after the resume: ${afterResume.toLocaleString('en-US')} IDs`,
    describe(b, stateFile),
  );
  const twins = judgeTwins(
    `(${a.name} stopped past the lock's stale time)`,
    { name: a.name, ids: idsOf(a.blocks) },
    { name: b.name, ids: idsOf(b.blocks) },
  );
  return {
    target: `${a.name} + ${b.name} on one --state-file`,
    notes,
    safetyViolation: twins,
    expectationMissed: problem,
  };
}

/** `standalone-step`: A holds, B waits, both wall clocks +10 s at once; both pulled for `effectMs` after it. */
export async function runStandaloneStep(o: StandaloneFaultOptions): Promise<StandaloneOutcome> {
  const clockFile = join(o.dir, `clock-${o.name}`);
  await writeFile(clockFile, '+0\n');
  const { dir, a, b, stateFile, problem } = await startPair(o, clockFile);
  const stepAt = Date.now();
  await writeFile(clockFile, `+${STEP_SECONDS}\n`);
  const end = stepAt + o.effectMs;
  let takeover: number | undefined;
  while (Date.now() < end && !o.signal.aborted) {
    if (takeover === undefined && becameReady(b)) takeover = Date.now() - stepAt;
    await sleep(100, o.signal);
  }
  await Promise.all([finish(a, dir), finish(b, dir)]);
  const notes = [
    `both clocks +${STEP_SECONDS} s; ${b.name} ${takeover !== undefined ? `took the lock and served ${(takeover / 1000).toFixed(1)} s after the step` : 'did not take the lock'}`,
    describe(a, stateFile),
    describe(b, stateFile),
  ];
  const twins = judgeTwins(
    `(a host-wide +${STEP_SECONDS} s step)`,
    { name: a.name, ids: idsOf(a.blocks) },
    { name: b.name, ids: idsOf(b.blocks) },
  );
  return {
    target: `${a.name} + ${b.name} on one --state-file`,
    notes,
    safetyViolation: twins,
    expectationMissed: problem,
  };
}

/** What `standalone-empty-state` saw of one node started on the truncated file. */
export interface EmptyStart {
  readonly name: string;
  /** Exit code when it ended by itself (undefined: still running when the run stopped it). */
  readonly exitCode: number | null | undefined;
  readonly ready: boolean;
  /** IDs it handed out, and how many of them the first run had handed out too. */
  readonly ids: number;
  readonly equalToFirst: number;
  /** Its log line naming the state file (the refusal), if any. */
  readonly stateFileLine: string | undefined;
  /** Its line refusing an unknown flag (a server older than `--fresh-state`), if any. */
  readonly unknownFlagLine: string | undefined;
  /** Its last output line, shown when it ended without either (a crash). */
  readonly lastLine?: string;
}

/**
 * The judgement of `standalone-empty-state`. Safety: the node on the empty file never serves, and the one started
 * with `--fresh-state` and its clock behind hands out no ID of the first run. Reported (not failing the run): the
 * refusal exits non-zero within its time limit with one line naming the state file.
 */
export function judgeEmptyState(
  plain: EmptyStart,
  fresh: EmptyStart,
): { notes: string[]; safetyViolation: string | undefined; expectationMissed: string | undefined } {
  const line = (s: EmptyStart): string =>
    `${s.name}: ${s.exitCode === undefined ? 'stopped by the run' : `exited by itself, code ${String(s.exitCode)}`}, ${s.ready ? 'was READY' : 'never ready'}, ${s.ids.toLocaleString('en-US')} IDs (${s.equalToFirst.toLocaleString('en-US')} equal to the first run's)${
      s.unknownFlagLine !== undefined
        ? `, "${s.unknownFlagLine}"`
        : s.stateFileLine !== undefined
          ? `, "${s.stateFileLine.slice(0, 200)}"`
          : s.lastLine !== undefined && s.exitCode !== undefined
            ? `, last line "${s.lastLine.slice(0, 200)}"`
            : ''
    }`;
  const unsafe: string[] = [];
  if (plain.ready || plain.ids > 0)
    unsafe.push(
      `${plain.name} served on an empty state file (${plain.ids.toLocaleString('en-US')} IDs, ${plain.equalToFirst.toLocaleString('en-US')} equal to the first run's)`,
    );
  if (fresh.equalToFirst > 0)
    unsafe.push(
      `${fresh.name} (--fresh-state, clock behind) handed out ${fresh.equalToFirst.toLocaleString('en-US')} ID(s) of the first run`,
    );
  const missed: string[] = [];
  if (!plain.ready && (plain.exitCode === undefined || plain.exitCode === 0))
    missed.push(`${plain.name} did not exit non-zero on the empty state file`);
  if (!plain.ready && plain.stateFileLine === undefined)
    missed.push(`${plain.name} logged no line naming the state file`);
  const noFlag = fresh.unknownFlagLine !== undefined ? '--fresh-state is unknown to this server' : undefined;
  if (noFlag !== undefined) (unsafe.length > 0 ? unsafe : missed).push(noFlag);
  return {
    notes: [line(plain), line(fresh)],
    safetyViolation: unsafe.length === 0 ? undefined : unsafe.join('; '),
    expectationMissed: missed.length === 0 ? undefined : missed.join('; '),
  };
}

/** Starts a node on the (truncated) state file with its clock `offsetSeconds` behind, pulls while it serves. */
async function startOnEmpty(
  o: StandaloneFaultOptions,
  name: string,
  stateFile: string,
  clockFile: string,
  firstIds: BigUint64Array,
  extra: readonly string[],
  dir: string,
): Promise<EmptyStart> {
  await truncate(stateFile, 0);
  const node = await startNode(o, name, stateFile, clockFile, extra);
  pull(node, o.region, o.signal);
  await readyOrExit(node, 8000, o.signal);
  // A node that serves is asked for IDs a while (the old code minted the first run's IDs again).
  if (becameReady(node)) await sleep(1000, o.signal);
  const exit = node.handle.exitStatus();
  await finish(node, dir);
  const msgs = messagesOf(node.handle.lines);
  const ids = idsOf(node.blocks);
  return {
    name,
    exitCode: exit?.code,
    ready: becameReady(node),
    ids: ids.length,
    equalToFirst: commonIds(firstIds, ids).count,
    stateFileLine: msgs.filter((m) => m.includes(stateFile)).at(-1),
    unknownFlagLine: msgs.find((m) => /fresh-state/.test(m) && /unknown|not a flag|unrecognized/i.test(m)),
    ...(msgs.length > 0 ? { lastLine: msgs.filter((m) => m.trim() !== '').at(-1) } : {}),
  };
}

/**
 * `standalone-empty-state`: a first run mints `effectMs` and stops cleanly; the file is truncated; a node is started
 * on it with its clock behind (so that it would mint inside the first run's milliseconds), then one with
 * `--fresh-state` the same way.
 */
export async function runStandaloneEmptyState(o: StandaloneFaultOptions): Promise<StandaloneOutcome> {
  const dir = join(o.dir, o.name);
  await mkdir(dir, { recursive: true });
  const stateFile = join(dir, 'state.json');
  const clockFile = join(o.dir, `clock-${o.name}`);
  await writeFile(clockFile, '+0\n');
  const first = await startNode(o, `${o.name}-first`, stateFile, clockFile);
  await readyOrExit(first, 10_000, o.signal);
  pull(first, o.region, o.signal);
  await sleep(o.effectMs, o.signal);
  await finish(first, dir);
  const firstIds = idsOf(first.blocks);
  const firstMs = first.blocks[0]?.receivedMs;
  const notes = [describe(first, stateFile)];
  if (firstMs === undefined || first.handle.exitStatus()?.code !== 0)
    return {
      target: `${first.name} (state file truncated)`,
      notes,
      safetyViolation: undefined,
      expectationMissed: `${first.name} did not mint and stop cleanly: nothing to judge`,
    };
  // Behind the first run by as much as lets the next node's clock start 300 ms after the first run's first ID.
  const behind = (): string => `-${((Date.now() - firstMs - 300) / 1000).toFixed(1)}`;
  await writeFile(clockFile, `${behind()}\n`);
  const plain = await startOnEmpty(o, `${o.name}-empty`, stateFile, clockFile, firstIds, [], dir);
  await writeFile(clockFile, `${behind()}\n`);
  const fresh = await startOnEmpty(o, `${o.name}-fresh`, stateFile, clockFile, firstIds, ['--fresh-state'], dir);
  const judged = judgeEmptyState(plain, fresh);
  return {
    target: `${first.name}'s state file, truncated to 0 bytes`,
    notes: [...notes, ...judged.notes],
    safetyViolation: judged.safetyViolation,
    expectationMissed: judged.expectationMissed,
  };
}

/** Runs one of the three standalone faults by its kind. */
export function runStandaloneFault(
  kind: 'standalone-pause' | 'standalone-step' | 'standalone-empty-state',
  o: StandaloneFaultOptions,
): Promise<StandaloneOutcome> {
  if (kind === 'standalone-pause') return runStandalonePause(o);
  if (kind === 'standalone-step') return runStandaloneStep(o);
  return runStandaloneEmptyState(o);
}

/** The handler of the three standalone kinds: standalone nodes on their own `--state-file`, apart from the fleet. */
export const standaloneFault: FaultHandler = async (c) => {
  const { run, record: r, fault: f } = c;
  if (f.kind !== 'standalone-pause' && f.kind !== 'standalone-step' && f.kind !== 'standalone-empty-state') return;
  const name = `${f.kind}-${f.index}`;
  r.target = `${name} (standalone nodes on their own --state-file)`;
  c.line();
  const s = await runStandaloneFault(f.kind, {
    ...run.o,
    faketimeLib: run.faketimeLib,
    dir: run.dir,
    name,
    effectMs: f.effectMs,
  });
  Object.assign(r, {
    target: s.target,
    expectationMissed: s.expectationMissed,
    safetyViolation: s.safetyViolation,
  });
  r.notes.push(...s.notes);
};
