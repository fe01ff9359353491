import { randomBytes } from 'node:crypto';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { Layout } from '@idgen/core';
import { systemClock } from './clock.js';
import type { ClockSource } from './clock.js';
import { LEASE_DEFAULTS, defaultNodeId, parseWorkerRange } from './config.js';
import type { WorkerRange } from './config.js';
import { errorText } from './etcd-client.js';
import { CorruptRecordError, LeaseConfigError, LeaseError } from './errors.js';
import { computeFloor, parseLastMsRecord } from './records.js';
import type { LastMsRecord } from './records.js';
import { nodeStandaloneIo, replaceDurably } from './standalone-io.js';
import type { StandaloneIo } from './standalone-io.js';
import { StateFileLock, thisHolder, waitMessage } from './state-file-lock.js';
import type { HeldLock } from './state-file-lock.js';
import type { LeaseSnapshot, LeaseState, LeaseTarget, WorkerLease } from './types.js';

/**
 * How a standalone node bounds itself between two writes of its state file, as an etcd holder does between
 * two `last-ms` refreshes (docs/design.md §5): the wall ceiling is the last written millisecond + TTL − margin, and a
 * restart after a crash starts above the last written millisecond + TTL + the clock bound.
 */
export const STANDALONE_STATE_TTL_MS = 3_000;
export const STANDALONE_STATE_MARGIN_MS = 1_000;
/** How often the state file is rewritten with the clock (ms). */
export const STANDALONE_STATE_INTERVAL_MS = 1_000;
/**
 * The monotonic deadline: minting stops this long (5 s − 1.5 s) after the lock was last proven held, and past it the
 * node fences for good, unless a proof came first (one precedes every state write, every second).
 */
export const STANDALONE_LOCK_PROOF_TTL_MS = 5_000;
export const STANDALONE_LOCK_PROOF_MARGIN_MS = 1_500;
const PROOF_WINDOW_MS = STANDALONE_LOCK_PROOF_TTL_MS - STANDALONE_LOCK_PROOF_MARGIN_MS;
/** How often a waiter judges the lock again. */
const LOCK_POLL_MS = 250;

/** Options of {@link createStandaloneLease}. */
export interface StandaloneLeaseOptions {
  readonly region: number;
  /** The first worker of this range is used; default 0-127 (so worker 0). */
  readonly workers?: WorkerRange | string;
  /**
   * The state file: the last millisecond this node may have minted in, in the `last-ms` record format. It is
   * locked while the node runs (a second standalone node on it refuses to start) and read at start (a restart
   * never mints at or below what the previous run may have minted, whatever the clock says). Keep it on a local file
   * system that survives a reboot ({@link defaultStandaloneStateFile}). Beside it: `<file>.created` (written once,
   * before the first state: from then on a missing state file is refused), `<file>.lock.<n>` (the lock) and
   * `<file>.lock.<n>.released`.
   */
  readonly stateFile: string;
  readonly nodeId?: string;
  readonly layout?: Layout;
  readonly clock?: ClockSource;
  /** Clock bound added to the floor after an unclean end (docs/design.md §5: 10 ms). */
  readonly clockBoundMs?: number;
  /** How often the state file is rewritten, 1 to 1999 ms; default {@link STANDALONE_STATE_INTERVAL_MS}. */
  readonly stateIntervalMs?: number;
  /**
   * How long to wait for a lock another live process holds before refusing, in ms; default 15 s (a restart that
   * overlaps the previous process's shutdown). A lock whose holder is gone is taken over at once.
   */
  readonly lockWaitMs?: number;
  /**
   * Start as a new state file over one that is empty, unreadable, or missing after a previous run (which are refused
   * without it). The last millisecond is then unknown, so the floor is the state directory's last change the file
   * system saw (its mtime, the state file's, its lock generations'), read before this node's own lock, + TTL + bound:
   * as after an unclean end then, whatever this host's clock says now. A readable state file is honoured either way.
   * idgen-server: `--fresh-state`.
   */
  readonly freshState?: boolean;
}

/**
 * Where a standalone node keeps its state file by default: a directory that survives a reboot (hosts clear the OS
 * temp directory at boot, and a node finding no state there would start as new). As root
 * `/var/lib/idgen/standalone-region-<region>.json`; otherwise under `$XDG_STATE_HOME` when that is an absolute path,
 * else `~/.local/state` (the XDG base directory specification's state directory): `…/idgen/standalone-region-<region>.json`.
 */
export function defaultStandaloneStateFile(
  region: number,
  env: Readonly<Record<string, string | undefined>> = process.env,
  uid: number | undefined = process.getuid?.(),
): string {
  const name = `standalone-region-${region}.json`;
  if (uid === 0) return join('/var/lib/idgen', name);
  const xdg = env['XDG_STATE_HOME'];
  if (xdg !== undefined && isAbsolute(xdg)) return join(xdg, 'idgen', name);
  return join(env['HOME'] || homedir(), '.local', 'state', 'idgen', name);
}

/**
 * The in-process lease for standalone mode: **one node only**, no etcd (docs/design.md §5, §6), asked for by name.
 * It assigns the first worker of the range. What keeps it from minting duplicates on its own:
 * - the state file is locked: a second standalone node on the same file waits, naming the holder, then refuses.
 *   The lock is taken over only from a holder that is provably gone: it ran on this host and no process has its pid
 *   and start time any more, or the host has rebooted since. A live holder is never taken over, even stopped
 *   (SIGSTOP, a frozen VM) and whatever the wall clock did; nor one this host cannot judge (another host or PID
 *   namespace). No clock takes part in that decision;
 * - every state write and every raise of the wall ceiling comes after a proof that the lock is still this node's
 *   (and the ceiling only after a proof made once the write landed), each within the monotonic deadline: 3.5 s
 *   after the last proof the guard stops minting, and the lease fences for good (a node resumed after a pause
 *   writes nothing);
 * - the state file holds the last millisecond this node may mint in, rewritten every second (written, fsynced,
 *   renamed, its directory fsynced); the node never mints above it + TTL − margin (the wall ceiling), and a restart
 *   starts above it (+ TTL + clock bound after a crash), so a clock stepped back across a restart cannot repeat an ID;
 * - an empty or unreadable state file, or a missing one after a previous run, is refused (see `freshState`).
 * Nothing coordinates with nodes on other state files: two of them with the same region and worker WILL mint
 * duplicates. That is what etcd is for.
 */
export function createStandaloneLease(options: StandaloneLeaseOptions, target: LeaseTarget): WorkerLease {
  return new StandaloneLease(options, target);
}

/** Where the lease is, beside the {@link LeaseState} it reports. */
type Phase =
  | { readonly kind: 'idle' }
  | Holding
  | { readonly kind: 'fenced'; readonly lock: HeldLock }
  | { readonly kind: 'releasing' }
  | { readonly kind: 'released' };

interface Holding {
  readonly kind: 'holding';
  readonly lock: HeldLock;
  /** Monotonic ms when the last proof that succeeded began: the deadline is this + 3.5 s. */
  provenAtMono: number;
  /** The highest millisecond written to the state file: `L` of the wall ceiling. */
  writtenMs: number;
}

/** What the state file held at start. */
type Previous =
  | { readonly kind: 'none' }
  | { readonly kind: 'record'; readonly record: LastMsRecord }
  | { readonly kind: 'fresh'; readonly over: string; readonly evidenceMs: number };

/** The lock was not proven held in time: fence, write nothing more. */
class LockNotHeldError extends LeaseError {
  constructor(message: string) {
    super('state-file', message, false);
  }
}

/** {@link createStandaloneLease}'s lease; `io` is for tests that watch or break the file operations. */
export class StandaloneLease implements WorkerLease {
  private readonly layout: Layout;
  private readonly clock: ClockSource;
  private readonly region: number;
  private readonly worker: number;
  private readonly stateFile: string;
  private readonly nodeId: string;
  private readonly clockBoundMs: number;
  private readonly intervalMs: number;
  private readonly lockWaitMs: number;
  private readonly freshState: boolean;
  /** Random per lease: its lock's token and its temporary files' names. */
  private readonly token = randomBytes(8).toString('hex');

  private phase: Phase = { kind: 'idle' };
  private state: LeaseState = 'idle';
  private message = 'not started (standalone: one node only, no etcd)';
  /** What the lease says while it holds and writes: the worker, the previous run, the file. */
  private aliveText = '';
  private floorMs: number | undefined;
  /** Whether `<stateFile>.created` is known to exist. */
  private created = false;
  private starting: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** The state write in progress, if any. */
  private busy: Promise<void> = Promise.resolve();
  private readonly listeners = new Set<(s: LeaseSnapshot) => void>();

  constructor(
    options: StandaloneLeaseOptions,
    private readonly target: LeaseTarget,
    private readonly io: StandaloneIo = nodeStandaloneIo,
  ) {
    this.layout = options.layout ?? DEFAULT_LAYOUT;
    this.clock = options.clock ?? systemClock;
    const problems: string[] = [];
    const { region, stateFile } = options;
    const intervalMs = options.stateIntervalMs ?? STANDALONE_STATE_INTERVAL_MS;
    const lockWaitMs = options.lockWaitMs ?? LEASE_DEFAULTS.lockWaitMs;
    if (!Number.isSafeInteger(region) || region < 0 || region > this.layout.maxRegion) {
      problems.push(`region must be an integer from 0 to ${this.layout.maxRegion}, got ${String(region)}`);
    }
    const workers = this.workerRange(options.workers, problems);
    if (typeof stateFile !== 'string' || stateFile === '') {
      problems.push('stateFile must be a file path (standalone mode keeps its last millisecond there)');
    }
    const ceilingWindow = STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS;
    if (!Number.isSafeInteger(intervalMs) || intervalMs < 1 || intervalMs >= ceilingWindow) {
      problems.push(`stateIntervalMs must be an integer from 1 to ${ceilingWindow - 1}, got ${String(intervalMs)}`);
    }
    if (!(lockWaitMs >= 0 && lockWaitMs < Number.POSITIVE_INFINITY)) {
      problems.push(`lockWaitMs must be a non-negative number of ms, got ${String(lockWaitMs)}`);
    }
    if (problems.length > 0) throw new LeaseConfigError(problems);
    this.region = region;
    this.worker = workers.first;
    this.stateFile = stateFile;
    this.nodeId = options.nodeId ?? defaultNodeId();
    this.clockBoundMs = options.clockBoundMs ?? LEASE_DEFAULTS.clockBoundMs;
    this.intervalMs = intervalMs;
    this.lockWaitMs = lockWaitMs;
    this.freshState = options.freshState === true;
  }

  start(signal?: AbortSignal): Promise<void> {
    if (this.phase.kind === 'released' || this.phase.kind === 'releasing')
      return Promise.reject(new LeaseError('released', 'this lease was released; create a new one', false));
    this.starting ??= this.run(signal).catch((e: unknown) => {
      this.starting = undefined;
      this.set('idle', `start failed: ${errorText(e)}`);
      throw e;
    });
    return this.starting;
  }

  setAddress(): void {
    // no discovery in standalone mode
  }

  async register(): Promise<void> {
    // no discovery in standalone mode: callers connect to the one node directly
  }

  async release(): Promise<void> {
    if (this.phase.kind === 'released' || this.phase.kind === 'releasing') return;
    await this.starting?.catch(() => undefined);
    const was = this.phase;
    this.phase = { kind: 'releasing' };
    clearTimeout(this.timer);
    await this.busy;
    this.target.unassign('draining', 'standalone lease released (shutting down)');
    if (was.kind === 'holding') {
      // Minting stopped above: the next run may start right above what is written now (if the lock is still ours).
      await this.writeState(was, true).catch(() => undefined); // not written: the next run waits as after a crash
    }
    if (was.kind === 'holding' || was.kind === 'fenced') await was.lock.release().catch(() => undefined);
    this.phase = { kind: 'released' };
    this.set('released', 'released');
  }

  snapshot(): LeaseSnapshot {
    const held = this.phase.kind === 'holding' ? this.phase : undefined;
    const alive = this.state === 'alive';
    const mono = this.clock.monoMs();
    return {
      state: this.state,
      nodeId: this.nodeId,
      region: alive ? this.region : undefined,
      worker: alive ? this.worker : undefined,
      leaseId: undefined,
      keepAliveAgeSeconds: held === undefined ? undefined : (mono - held.provenAtMono) / 1000,
      deadlineInMs: held === undefined ? undefined : this.deadlineOf(held) - mono,
      floorMs: this.floorMs,
      message: this.message,
      mode: 'standalone',
    };
  }

  on(_event: 'state', fn: (s: LeaseSnapshot) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Lock, read the previous run's state, write the first state, assign. */
  private async run(signal: AbortSignal | undefined): Promise<void> {
    // Read before our own lock file changes the directory (with a clock that may now be behind the previous run's).
    const before = this.freshState ? await this.lastChangeMs() : -1;
    const lock = await this.takeLock(signal);
    try {
      signal?.throwIfAborted();
      const previous = await this.readPrevious(before);
      const record = previous.kind === 'record' ? previous.record : undefined;
      // A fresh start knows no last millisecond, but the file system's clock saw the previous run's last change to
      // the state directory (every write renames into it, a release unlinks its lock file, an emptying truncates):
      // an unclean end then, so minting starts above it + TTL + bound, whatever this host's clock says now.
      const freshFloor =
        previous.kind === 'fresh' ? previous.evidenceMs + STANDALONE_STATE_TTL_MS + this.clockBoundMs : -1;
      const floorMs = Math.max(
        computeFloor(record, {
          ttlMs: STANDALONE_STATE_TTL_MS,
          clockBoundMs: this.clockBoundMs,
          epochMs: this.layout.epochMs,
        }),
        freshFloor,
        -1,
      );
      this.floorMs = floorMs;
      const held: Holding = { kind: 'holding', lock, provenAtMono: this.clock.monoMs(), writtenMs: -1 };
      await this.writeState(held, false);
      this.phase = held;
      this.target.assign({
        region: this.region,
        worker: this.worker,
        floorMs,
        deadlineMonoMs: this.deadlineOf(held),
        ceilingMs: this.ceilingOf(held),
      });
      this.schedule(held);
      this.aliveText = this.aliveMessage(previous, floorMs);
      this.set('alive', this.aliveText);
    } catch (e) {
      // Nothing was minted: the lock may go at once (a state written above reads as an unclean end).
      clearTimeout(this.timer);
      this.phase = { kind: 'idle' };
      await lock.release().catch(() => undefined);
      throw e;
    }
  }

  private async takeLock(signal: AbortSignal | undefined): Promise<HeldLock> {
    try {
      await this.io.mkdirs(dirname(this.stateFile));
      const lock = new StateFileLock(this.stateFile, this.io);
      return await lock.acquire({
        me: thisHolder(this.nodeId, new Date(this.clock.nowMs()).toISOString(), this.token),
        attempts: Math.max(1, Math.ceil(this.lockWaitMs / LOCK_POLL_MS)),
        pollMs: LOCK_POLL_MS,
        ...(signal === undefined ? {} : { signal }),
        onWait: (v) => this.set('claiming', waitMessage(v)),
      });
    } catch (e) {
      if (e instanceof LeaseError || signal?.aborted === true) throw e;
      throw new LeaseError(
        'state-file',
        `cannot lock the standalone state file ${this.stateFile}: ${errorText(e)}`,
        false,
      );
    }
  }

  /**
   * The previous run's record. Refused (never a guess at a floor lower than the truth): an empty or unreadable file,
   * or a missing one while `<stateFile>.created` says a state was written here; `freshState` starts new instead.
   */
  /**
   * The latest modification time of the state file, its directory and the files beside it (the created marker, lock
   * generations), whole milliseconds rounded up; -1 when none is there.
   */
  private async lastChangeMs(): Promise<number> {
    const dir = dirname(this.stateFile);
    const base = this.stateFile.slice(dir.length + 1);
    const names = await this.io.readdir(dir).catch(() => [] as string[]);
    const paths = [dir, this.stateFile, ...names.filter((n) => n.startsWith(`${base}.`)).map((n) => join(dir, n))];
    let latest = -1;
    for (const p of paths) {
      const m = await this.io.mtimeMs(p).catch(() => undefined);
      if (m !== undefined) latest = Math.max(latest, Math.ceil(m));
    }
    return latest;
  }

  private async readPrevious(before: number): Promise<Previous> {
    const file = this.stateFile;
    const raw = await this.readIfExists(file);
    this.created = (await this.readIfExists(this.createdFile())) !== undefined;
    let problem: string;
    if (raw === undefined) {
      if (!this.created) return { kind: 'none' };
      problem = `is missing, but ${this.createdFile()} says a previous run kept its last millisecond there`;
    } else if (raw.trim() === '') {
      problem = 'is empty (a write cut short, e.g. by a power loss)';
    } else {
      try {
        return { kind: 'record', record: parseLastMsRecord(file, raw.trim()) };
      } catch (e) {
        problem = `is unreadable (${e instanceof CorruptRecordError ? e.message : errorText(e)})`;
      }
    }
    if (this.freshState) {
      const evidenceMs = Math.max(before, await this.lastChangeMs());
      return { kind: 'fresh', over: problem.replace(/ \(.*$/, ''), evidenceMs };
    }
    throw new LeaseError(
      'state-file',
      `the standalone state file ${file} ${problem}: refusing to guess a floor. To start fresh on purpose: freshState ` +
        `(idgen-server --fresh-state; it mints above the state directory's last change + 3 s), or delete ${file} and ` +
        `${this.createdFile()}`,
      false,
    );
  }

  /**
   * Writes the state file, never below what it wrote before: a proof, the write (fsynced), a proof before the rename,
   * the rename (the directory fsynced), and a proof after it, so that the ceiling raised on what was written is
   * raised only while the lock was this node's after the write landed. Throws {@link LockNotHeldError} when a proof
   * fails or the deadline passes, or the I/O error.
   */
  private async writeState(held: Holding, released: boolean): Promise<void> {
    await this.prove(held);
    const now = this.clock.nowMs();
    const ms = Math.max(now, this.floorMs ?? -1, this.target.lastMintedMs(), held.writtenMs);
    const record: LastMsRecord = {
      ms,
      released,
      nodeId: this.nodeId,
      at: new Date(now).toISOString(),
      ttlMs: STANDALONE_STATE_TTL_MS,
    };
    if (!this.created) await this.writeCreatedMarker(now);
    const tmp = `${this.stateFile}.${this.token}.tmp`;
    await replaceDurably(this.io, this.stateFile, tmp, `${JSON.stringify(record)}\n`, () => this.prove(held));
    await this.prove(held);
    held.writtenMs = ms;
  }

  /** Checks the deadline, proves the lock, checks the deadline again; moves `provenAtMono` on success. */
  private async prove(held: Holding): Promise<void> {
    const at = this.clock.monoMs();
    this.checkDeadline(held, at);
    const proof = await held.lock.prove();
    if (proof.kind === 'lost') throw new LockNotHeldError(proof.why);
    this.checkDeadline(held, this.clock.monoMs());
    held.provenAtMono = at;
  }

  private checkDeadline(held: Holding, mono: number): void {
    if (mono < this.deadlineOf(held)) return;
    throw new LockNotHeldError(
      `the lock on ${this.stateFile} was last proven held ${Math.round(mono - held.provenAtMono)} ms ago ` +
        `(a paused process, or a state directory that stopped answering), past the ${PROOF_WINDOW_MS} ms deadline`,
    );
  }

  private async writeCreatedMarker(nowMs: number): Promise<void> {
    const marker = {
      createdAt: new Date(nowMs).toISOString(),
      nodeId: this.nodeId,
      note: 'idgen standalone: a state file was written beside this one; a missing or empty one is refused',
    };
    const tmp = `${this.createdFile()}.${this.token}.tmp`;
    await replaceDurably(this.io, this.createdFile(), tmp, `${JSON.stringify(marker)}\n`);
    this.created = true;
  }

  private schedule(held: Holding): void {
    this.timer = setTimeout(() => {
      this.busy = this.refresh(held);
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Every interval: write the state and move the deadline and the ceiling forward, or fence. */
  private async refresh(held: Holding): Promise<void> {
    if (this.phase !== held) return;
    try {
      await this.writeState(held, false);
      if (this.phase !== held) return;
      this.target.extend({ deadlineMonoMs: this.deadlineOf(held), ceilingMs: this.ceilingOf(held) });
      this.set('alive', this.aliveText);
    } catch (e) {
      if (this.phase !== held) return;
      if (e instanceof LockNotHeldError) return this.fence(held, e.message);
      // Not written: the ceiling stays where it was (the guard fences at it), and the deadline runs out unless a
      // later write proves the lock in time.
      this.set('alive', `${this.aliveText}; writing the state file failed: ${errorText(e)}`);
    }
    this.schedule(held);
  }

  private fence(held: Holding, why: string): void {
    this.phase = { kind: 'fenced', lock: held.lock };
    this.target.unassign('lease', why);
    this.set('fenced', `${why}: stopped minting and writing the state file for good; restart the node`);
  }

  private deadlineOf(held: Holding): number {
    return held.provenAtMono + PROOF_WINDOW_MS;
  }

  private ceilingOf(held: Holding): number {
    return held.writtenMs + STANDALONE_STATE_TTL_MS - STANDALONE_STATE_MARGIN_MS;
  }

  private createdFile(): string {
    return `${this.stateFile}.created`;
  }

  private async readIfExists(file: string): Promise<string | undefined> {
    try {
      return await this.io.readFile(file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new LeaseError('state-file', `cannot read the standalone state file ${file}: ${errorText(e)}`, false);
    }
  }

  private aliveMessage(previous: Previous, floorMs: number): string {
    const after =
      previous.kind === 'none'
        ? 'a new state file'
        : previous.kind === 'fresh'
          ? `started fresh (freshState) over a state file that ${previous.over}: minting above ${floorMs} (its directory last changed at ${previous.evidenceMs}, + TTL + bound)`
          : previous.record.released
            ? `the previous run released at ${previous.record.ms}`
            : `the previous run ended uncleanly at ${previous.record.ms}: minting above ${floorMs}`;
    return `standalone (one node only, no etcd): worker ${this.worker} of region ${this.region}; ${after}; state in ${this.stateFile}`;
  }

  private workerRange(given: WorkerRange | string | undefined, problems: string[]): WorkerRange {
    let workers: WorkerRange = { first: 0, last: this.layout.maxWorker };
    try {
      if (typeof given === 'string') workers = parseWorkerRange(given);
      else if (given !== undefined) workers = given;
    } catch (e) {
      problems.push(...(e as LeaseConfigError).problems);
    }
    const { first, last } = workers;
    if (
      !Number.isSafeInteger(first) ||
      !Number.isSafeInteger(last) ||
      first < 0 ||
      last > this.layout.maxWorker ||
      first > last
    ) {
      problems.push(
        `workers must be a range within 0-${this.layout.maxWorker} with first ≤ last, got ${String(first)}-${String(last)}`,
      );
    }
    return workers;
  }

  /** Reports a state and why; listeners hear only of a change. */
  private set(s: LeaseState, m: string): void {
    if (s === this.state && m === this.message) return;
    this.state = s;
    this.message = m;
    const snap = this.snapshot();
    for (const fn of this.listeners) fn(snap);
  }
}
