import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { errorText } from './etcd-client.js';
import { LeaseError } from './errors.js';
import { syncDir, writeSynced } from './standalone-io.js';
import type { StandaloneIo } from './standalone-io.js';

/**
 * What a holder writes into its lock file (JSON), before the file exists under its name, and never changes. Who it
 * is, and what tells a waiter on the same host whether it is still alive.
 */
export interface LockHolder {
  readonly pid: number;
  readonly nodeId: string;
  readonly host: string;
  /** Linux: `/proc/sys/kernel/random/boot_id`, new at every boot. */
  readonly bootId?: string;
  /** Linux: `/proc/self/ns/pid`, the PID namespace its pid is a number in. */
  readonly pidNamespace?: string;
  /** Linux: its start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`); a reused pid has another. */
  readonly startTicks?: string;
  /** When it took the lock, on its wall clock: shown, never compared. */
  readonly since: string;
  /** Random, one per lease: what the holder looks for when it proves its lock is still its own. */
  readonly token: string;
}

/**
 * What a waiter makes of the lock as it finds it:
 * - `free`: no lock, a released one, or one whose holder is provably gone (crashed, or the host rebooted): take
 *   generation `next`;
 * - `held`: its holder is alive on this host (running, or stopped: a SIGSTOP or a frozen VM keeps its pid);
 * - `unknown`: nothing here can tell whether its holder lives (another host or PID namespace, an unreadable lock).
 * Neither of the last two is ever taken over: no clock decides it, so no clock step can.
 */
export type LockVerdict =
  | { readonly kind: 'free'; readonly next: number; readonly previous?: LockHolder }
  | { readonly kind: 'held'; readonly holder: LockHolder }
  | { readonly kind: 'unknown'; readonly why: string; readonly file: string; readonly holder?: LockHolder };

/** What a holder's proof found: its lock is still the newest and its own, or why not. */
export type LockProof = { readonly kind: 'held' } | { readonly kind: 'lost'; readonly why: string };

/** A verdict that makes a waiter wait. */
export type WaitVerdict = Exclude<LockVerdict, { kind: 'free' }>;

/** `pid 1234 (node standalone-abc) since 2026-12-01T20:01:02Z`. */
export function describeHolder(h: LockHolder): string {
  return `pid ${h.pid} (node ${h.nodeId}) since ${h.since.replace(/\.\d+Z$/, 'Z')}`;
}

/** What the lease says while it waits (snapshot message, the boot log). */
export function waitMessage(v: WaitVerdict): string {
  if (v.kind === 'held') return `waiting for the state file's lock, held by ${describeHolder(v.holder)}`;
  const by = v.holder === undefined ? '' : `, held by ${describeHolder(v.holder)}`;
  return `waiting for the state file's lock${by}: ${v.why}`;
}

/**
 * The lock on a standalone state file `S`: generation files `S.lock.1`, `S.lock.2`, …, each created whole (a
 * temporary file fsynced, then hard-linked under its name, which fails if the name exists) and holding its
 * {@link LockHolder}. The newest generation is the lock; `S.lock.<n>.released` marks it released. A waiter takes
 * generation n + 1 only when generation n is released or its holder is gone, and only one waiter can create it.
 * The newest generation is never deleted (a new holder deletes the older ones), so numbers never repeat and a waiter
 * that judged an old generation cannot displace a newer holder.
 */
export class StateFileLock {
  private readonly dir: string;
  private readonly base: string;

  constructor(
    readonly stateFile: string,
    readonly io: StandaloneIo,
  ) {
    this.dir = dirname(stateFile);
    this.base = `${basename(stateFile)}.lock`;
  }

  /** The lock file of generation `gen`. */
  file(gen: number): string {
    return join(this.dir, `${this.base}.${gen}`);
  }

  /**
   * Takes the lock: judges it, takes a free generation, or waits `pollMs` between up to `attempts` judgements while
   * it is held, calling `onWait` whenever the reason to wait changes. Refuses (a `state-file` LeaseError) naming the
   * holder when the attempts run out.
   */
  async acquire(o: {
    readonly me: LockHolder;
    readonly attempts: number;
    readonly pollMs: number;
    readonly signal?: AbortSignal;
    readonly onWait: (v: WaitVerdict) => void;
  }): Promise<HeldLock> {
    let said = '';
    for (let waited = 1; ;) {
      o.signal?.throwIfAborted();
      const v = await this.judge();
      if (v.kind === 'free') {
        const held = await this.tryTake(v.next, o.me, v.previous);
        if (held !== undefined) return held;
        continue; // another waiter created that generation first: judge its holder
      }
      const message = waitMessage(v);
      if (message !== said) o.onWait(v);
      said = message;
      if (waited >= o.attempts) throw this.refusal(v);
      waited += 1;
      await sleep(o.pollMs, o.signal);
    }
  }

  /** Judges the newest generation (see {@link LockVerdict}). */
  async judge(): Promise<LockVerdict> {
    const { gens, released, legacy } = await this.scan();
    if (legacy) {
      return {
        kind: 'unknown',
        why: 'an older idgen (proper-lockfile) locked it, and may still run on it',
        file: join(this.dir, this.base),
      };
    }
    const top = gens.at(-1);
    if (top === undefined) return { kind: 'free', next: 1 };
    if (released.has(top)) return { kind: 'free', next: top + 1 };
    const file = this.file(top);
    let holder: LockHolder;
    try {
      holder = parseLockHolder(await this.io.readFile(file));
    } catch (e) {
      return { kind: 'unknown', why: `its lock file cannot be read (${errorText(e)})`, file };
    }
    return judgeHolder(holder, top, file);
  }

  /** Creates generation `gen` holding `me`; `undefined` when another process created it first. */
  private async tryTake(gen: number, me: LockHolder, previous: LockHolder | undefined): Promise<HeldLock | undefined> {
    const tmp = join(this.dir, `${this.base}.${me.token}.tmp`);
    await writeSynced(this.io, tmp, `${JSON.stringify(me)}\n`);
    try {
      await this.io.link(tmp, this.file(gen));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return undefined;
      throw new LeaseError(
        'state-file',
        `cannot lock the standalone state file ${this.stateFile}: ${errorText(e)}`,
        false,
      );
    } finally {
      await this.io.unlink(tmp).catch(() => undefined);
    }
    await syncDir(this.io, this.dir);
    await this.forgetBefore(gen, previous);
    return new HeldLock(this, gen, me);
  }

  /** Best effort: the generations before `gen` and what a gone holder left half-written. */
  private async forgetBefore(gen: number, previous: LockHolder | undefined): Promise<void> {
    const { gens } = await this.scan().catch(() => ({ gens: [] as number[] }));
    const stale = gens.filter((g) => g < gen).flatMap((g) => [this.file(g), `${this.file(g)}.released`]);
    if (previous !== undefined) stale.push(`${this.stateFile}.${previous.token}.tmp`);
    await Promise.all(stale.map((f) => this.io.unlink(f).catch(() => undefined)));
  }

  /** The lock files next to the state file: generations (ascending), released ones, and an older idgen's lock. */
  async scan(): Promise<{ gens: number[]; released: Set<number>; legacy: boolean }> {
    const gens: number[] = [];
    const released = new Set<number>();
    let legacy = false;
    for (const name of await this.io.readdir(this.dir)) {
      if (name === this.base) legacy = true;
      if (!name.startsWith(`${this.base}.`)) continue;
      const m = /^(\d{1,15})(\.released)?$/.exec(name.slice(this.base.length + 1));
      const gen = Number(m?.[1]);
      if (m === null || !(gen >= 1)) continue;
      if (m[2] === undefined) gens.push(gen);
      else released.add(gen);
    }
    return { gens: gens.sort((a, b) => a - b), released, legacy };
  }

  private refusal(v: WaitVerdict): LeaseError {
    if (v.kind === 'held') {
      return new LeaseError(
        'state-file',
        `another standalone node holds ${this.stateFile}: ${describeHolder(v.holder)}, still running: ` +
          'give each node its own --state-file, or use etcd',
        false,
      );
    }
    const by = v.holder === undefined ? '' : ` (${describeHolder(v.holder)})`;
    return new LeaseError(
      'state-file',
      `another standalone node may hold ${this.stateFile}${by}: ${v.why}; if no node runs on it, delete ${v.file}`,
      false,
    );
  }
}

/** A generation this process created: proves it is still the lock, and releases it. */
export class HeldLock {
  constructor(
    private readonly lock: StateFileLock,
    readonly gen: number,
    readonly me: LockHolder,
  ) {}

  get file(): string {
    return this.lock.file(this.gen);
  }

  /** Whether this generation is still the newest and still ours. An I/O error throws: nothing proven either way. */
  async prove(): Promise<LockProof> {
    const { gens } = await this.lock.scan();
    const newest = gens.at(-1);
    if (newest !== undefined && newest > this.gen) {
      return {
        kind: 'lost',
        why: `another process took the lock on ${this.lock.stateFile} (${this.lock.file(newest)})`,
      };
    }
    if (newest !== this.gen) return { kind: 'lost', why: `the lock file ${this.file} was removed` };
    let token: unknown;
    try {
      token = parseLockHolder(await this.lock.io.readFile(this.file)).token;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        return { kind: 'lost', why: `the lock file ${this.file} was removed` };
      }
      throw e;
    }
    return token === this.me.token
      ? { kind: 'held' }
      : { kind: 'lost', why: `the lock file ${this.file} was replaced` };
  }

  /** Marks this generation released: the next process may take the lock at once. Write nothing after this. */
  async release(): Promise<void> {
    const io = this.lock.io;
    await writeSynced(io, `${this.file}.released`, `${JSON.stringify({ nodeId: this.me.nodeId })}\n`);
    await syncDir(io, dirname(this.file));
  }
}

/** Parses a lock file; throws on anything that is not a whole {@link LockHolder}. */
export function parseLockHolder(raw: string): LockHolder {
  const o = JSON.parse(raw) as Partial<Record<keyof LockHolder, unknown>> | null;
  const text = (k: keyof LockHolder): boolean => typeof o?.[k] === 'string';
  const optional = (k: keyof LockHolder): boolean => o?.[k] === undefined || text(k);
  const pid = o?.pid;
  if (
    typeof pid !== 'number' ||
    !Number.isSafeInteger(pid) ||
    pid < 1 ||
    !text('nodeId') ||
    !text('host') ||
    !text('since') ||
    !text('token') ||
    !optional('bootId') ||
    !optional('pidNamespace') ||
    !optional('startTicks')
  ) {
    throw new Error(`not a lock holder record: ${raw.slice(0, 200)}`);
  }
  return o as unknown as LockHolder;
}

/** This process as a lock holder describes itself. */
export function thisHolder(nodeId: string, since: string, token: string): LockHolder {
  const here = localHost();
  const startTicks = startTicksOf(process.pid);
  return {
    pid: process.pid,
    nodeId,
    host: here.host,
    ...(here.bootId === undefined ? {} : { bootId: here.bootId }),
    ...(here.pidNamespace === undefined ? {} : { pidNamespace: here.pidNamespace }),
    ...(startTicks === undefined ? {} : { startTicks }),
    since,
    token,
  };
}

/**
 * Whether the holder of generation `gen` is provably gone. Gone: it ran on this host (same host name) and the host
 * has booted since (another boot id), or no process has its pid (`kill(pid, 0)` fails with ESRCH), or the process
 * with its pid started at another time (the pid was reused). Alive: a process with its pid and start time exists,
 * running or stopped. Unknown: another host, or another PID namespace (a container), where its pid says nothing.
 */
function judgeHolder(h: LockHolder, gen: number, file: string): LockVerdict {
  const here = localHost();
  if (h.host !== here.host) {
    return { kind: 'unknown', why: `it ran on host ${h.host}, whose processes this host cannot see`, file, holder: h };
  }
  if (h.bootId !== undefined && here.bootId !== undefined && h.bootId !== here.bootId) {
    return { kind: 'free', next: gen + 1, previous: h }; // the host rebooted since: every process of then is gone
  }
  if (h.pidNamespace !== here.pidNamespace) {
    const ns = h.pidNamespace ?? 'none recorded';
    return { kind: 'unknown', why: `it ran in another PID namespace (${ns}; a container?)`, file, holder: h };
  }
  try {
    process.kill(h.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ESRCH') return { kind: 'free', next: gen + 1, previous: h };
    // EPERM: a process of another user has that pid; its start time below says whether it is the holder
  }
  const startTicks = startTicksOf(h.pid);
  if (h.startTicks !== undefined && startTicks !== undefined && startTicks !== h.startTicks) {
    return { kind: 'free', next: gen + 1, previous: h }; // the pid now belongs to a later process
  }
  return { kind: 'held', holder: h };
}

let cachedHost: { host: string; bootId: string | undefined; pidNamespace: string | undefined } | undefined;

function localHost(): { host: string; bootId: string | undefined; pidNamespace: string | undefined } {
  cachedHost ??= {
    host: hostname(),
    bootId: readOr(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()),
    pidNamespace: readOr(() => readlinkSync('/proc/self/ns/pid')),
  };
  return cachedHost;
}

/** Field 22 of `/proc/<pid>/stat` (after the parenthesised command name, which may hold spaces), or undefined. */
function startTicksOf(pid: number): string | undefined {
  return readOr(() => {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat
      .slice(stat.lastIndexOf(')') + 1)
      .trim()
      .split(/\s+/)[19];
  });
}

function readOr(read: () => string | undefined): string | undefined {
  try {
    return read() || undefined;
  } catch {
    return undefined;
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      signal?.removeEventListener('abort', abort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const abort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', abort, { once: true });
  });
}
