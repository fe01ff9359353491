/**
 * The generator nodes of a chaos run, and their supervisor. Each of the `nodes` positions (n1 … n4) runs
 * one `idgen-server` process at a time under libfaketime with its own clock-control file (docs/toolchain.md
 * "Clock faults"), so any node can be given a clock jump. Every process ("incarnation", `n2#3`) gets fresh
 * ports, so a block's node URL names the process that minted it.
 *
 * Like an orchestrator, the fleet restarts a process that exited on its own (a spare whose boot found
 * every slot taken exits non-zero; a node past its clock-fence bound exits on purpose: docs/design.md §4), after
 * a short delay. Processes the chaos schedule kills or stops are not restarted here: the fault does it.
 *
 * Each position talks to etcd through its own link: one TCP proxy per etcd member on loopback
 * (`@idgen/testing`'s `createTcpProxy`), the node's `--etcd` naming its proxies, so a fault can cut one node
 * off from etcd while its callers still reach it, or delay its traffic (issue 12). The link belongs to the
 * position and outlives its processes.
 *
 * It reads each process's JSON log lines as they come, for the lease holdings (`lease: alive` with worker,
 * lease id and floor: rule 2), the fences (`guard: fenced` / `lease: fenced` with their reason), and
 * readiness; and it keeps the node list file the callers discover nodes from.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createTcpProxy, freePort, spawnProcess, type ProcessHandle, type TcpProxy } from '@idgen/testing';
import { createNetnsNodeLink, type NetnsExposure, type NetnsNodeLink } from './netns/netns-node-link.js';
import { NO_METRICS, parseNodeMetrics, type NodeMetrics } from './node-metrics.js';
import { treeBuild, type ServerBuild } from './server-build.js';
import type { Holding } from './verify.js';

/** One fence a node logged. */
export interface FenceEvent {
  /** Node process, e.g. `n2#3`. */
  readonly name: string;
  readonly reason: string;
  /** Wall ms when the chaos run read the line. */
  readonly atMs: number;
  /** `guard` (the minter refused) or `lease` (the lease fenced the guard). */
  readonly source: 'guard' | 'lease';
}

/** One node process. */
export interface Incarnation {
  readonly name: string;
  readonly position: string;
  readonly url: string;
  readonly address: string;
  readonly metricsUrl: string;
  readonly handle: ProcessHandle;
  /** The server build it runs (`tree`, or a previous release's version: `--previous-server`). */
  readonly version: string;
  readonly spawnedMs: number;
  readyMs: number | undefined;
  exitedMs: number | undefined;
  exitCode: number | null | undefined;
  exitSignal: string | null | undefined;
  /** The chaos schedule ended (or is ending) this process: do not restart it. */
  expectedExit: boolean;
  paused: boolean;
  /** Worker slot of its latest holding, undefined when fenced or not yet holding. */
  worker: number | undefined;
  /** Last successful scrape of its /metrics. */
  metrics: NodeMetrics;
  /** Last fatal/error log message (why it exited, for the report). */
  lastError: string | undefined;
  stdoutSeen: number;
  stderrSeen: number;
  /** Exited and its last output read (output can trail the exit event a little). */
  finalized: boolean;
  log: WriteStream;
}

/** Options of {@link createNodeFleet}. */
export interface NodeFleetOptions {
  /** Path of `apps/server/dist/main.js`. */
  readonly serverMain: string;
  /** A previous release's build (`--previous-server`), which `rolling-restart` alternates with the tree's. */
  readonly previous?: ServerBuild;
  /** libfaketime.so.1 (preloaded into every node). */
  readonly faketimeLib: string;
  /** Directory for clock-control files, node logs and the node list. */
  readonly dir: string;
  readonly etcd: readonly string[];
  readonly region: number;
  /** Node positions (4). */
  readonly nodes: number;
  /** Worker slots `0 … slots−1` the nodes share (3: one node is always a spare). */
  readonly slots: number;
  readonly leaseTtlSeconds: number;
  /** Nodes reach etcd through a proxy per position and member (default true; false: straight to etcd). */
  readonly etcdLinks?: boolean;
  /**
   * The position that runs in its own network namespace and reaches etcd through the router namespace
   * (`--netns`, src/netns/netns-node-link.ts), and the relay agent it needs (dist/netns/relay-main.js).
   */
  readonly netns?: { readonly position: string; readonly relayMain: string };
  /** Delay before an exited process is restarted (default 2000 ms). */
  readonly restartDelayMs?: number;
  /** Progress lines. */
  readonly say: (line: string) => void;
}

/** The fleet. */
export interface NodeFleet {
  /** File with the listed nodes (`[{"address": …}]`), for the callers' discovery. */
  readonly nodesFile: string;
  readonly positions: readonly string[];
  /** Every process started so far, in start order. */
  readonly incarnations: readonly Incarnation[];
  readonly holdings: readonly Holding[];
  readonly fences: readonly FenceEvent[];
  /** The tree's build, and the previous release's when given (`--previous-server`). */
  readonly builds: { readonly tree: ServerBuild; readonly previous: ServerBuild | undefined };
  /** The build a position's next process runs (the supervisor's restarts too): the tree's until set. */
  buildOf(position: string): ServerBuild;
  /** Sets the build a position's next processes run (`rolling-restart` across versions). */
  setBuild(position: string, build: ServerBuild): void;
  /** Processes restarted by the supervisor (exited on their own). */
  restarts(): number;
  /** Of those, spares that exited at boot because every slot was held. */
  spareRestarts(): number;
  /** Starts one process on every position. */
  startAll(): Promise<void>;
  /** Resolves once `n` processes are ready (logged `ready`); rejects after `timeoutMs`. */
  waitReady(n: number, timeoutMs: number): Promise<void>;
  /** The running process of a position. */
  current(position: string): Incarnation | undefined;
  /** Starts a new process on `position` (clock control reset to +0), of the position's build ({@link buildOf}). */
  start(position: string): Promise<Incarnation>;
  /** Processes that can mint now (`/readyz` 200), by position. */
  serving(): Promise<Incarnation[]>;
  /** Cuts the position's link to etcd (every member; open connections go silent, see `createTcpProxy`). */
  cutEtcd(position: string): void;
  /** Restores the position's link to etcd. */
  restoreEtcd(position: string): void;
  /** Delays the traffic of every position's link to etcd by `ms` each way (0: none). */
  setEtcdLatency(ms: number): void;
  /** Whether the position's link to etcd is cut. */
  etcdCut(position: string): boolean;
  /** The position in its own network namespace (`--netns`), if any. */
  readonly netnsPosition: string | undefined;
  /** Cuts the netns position off from etcd in the router namespace (silence both ways; callers still reach it). */
  netnsCut(): void;
  /** Deletes the netns cut. */
  netnsHeal(): void;
  /** Writes `offset` (faketime syntax: `-3`, `-0.008`, `+0`) into the position's clock-control file. */
  setClock(position: string, offset: string): Promise<void>;
  /** Scrapes one process's /metrics (kept on the incarnation). */
  scrape(inc: Incarnation): Promise<void>;
  /** Scrapes every running, unpaused process. */
  scrapeAll(): Promise<void>;
  /** Reads new log lines and notices exits now (also runs every 100 ms on its own). */
  poll(): void;
  /** Stops supervising, then SIGTERMs every process (SIGKILL after `graceMs`). */
  stopAll(graceMs: number): Promise<void>;
}

interface LogLine {
  msg?: unknown;
  level?: unknown;
  worker?: unknown;
  leaseId?: unknown;
  floorMs?: unknown;
  detail?: unknown;
  reason?: unknown;
  why?: unknown;
  err?: unknown;
}

/** A holding seen in a `lease: alive` line before its floor was known. */
interface PendingHolding {
  name: string;
  url: string;
  worker: number;
  leaseId: string;
  seenMs: number;
}

/**
 * Whether the fleet still restarts processes that exit on their own: a named phase rather than a flag, so
 * `stopAll` reads as the one transition (house rule: states as tagged unions).
 */
type SupervisorPhase = { readonly t: 'supervising' } | { readonly t: 'stopped' };

/** `fetch` with a deadline; undefined on any failure (a node down or paused answers nothing). */
async function fetchText(url: string, timeoutMs: number): Promise<{ status: number; text: string } | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, text: await res.text() };
  } catch {
    return undefined;
  }
}

/** The newest worker floor a `lease: alive` line states (a field, or the older `minting above N` detail). */
function floorOf(j: LogLine): number | undefined {
  if (typeof j.floorMs === 'number') return j.floorMs;
  if (typeof j.detail !== 'string') return undefined;
  const m = /minting above (\d+)/.exec(j.detail);
  return m === null ? undefined : Number(m[1]);
}

/** Why a process logged an error (`type: message`, or the message alone), for the report. */
function errorOf(j: LogLine, msg: string): string {
  const err = j.err as { type?: unknown; message?: unknown } | string | undefined;
  const detail =
    typeof err === 'string'
      ? err
      : typeof err?.type === 'string'
        ? `${err.type}: ${String(err.message).slice(0, 160)}`
        : undefined;
  return detail === undefined ? msg : `${msg}: ${detail}`;
}

/**
 * The fleet and its supervisor: starting processes, reading their logs (holdings, fences, readiness), the node
 * list file, the etcd links, and stopping. A class rather than a closure (the house rule: past ~150 lines a
 * closure becomes named parts), so each job is a named method.
 */
class ChaosNodeFleet implements NodeFleet {
  readonly nodesFile: string;
  readonly positions: readonly string[];
  readonly incarnations: Incarnation[] = [];
  readonly holdings: Holding[] = [];
  readonly fences: FenceEvent[] = [];
  readonly builds: { readonly tree: ServerBuild; readonly previous: ServerBuild | undefined };
  readonly #o: NodeFleetOptions;
  readonly #buildOf = new Map<string, ServerBuild>();
  /** Positions whose {@link start} has not yet pushed its incarnation: the supervisor must not start a second. */
  readonly #starting = new Set<string>();
  readonly #holdingIndex = new Map<string, number>();
  readonly #pendingFloor = new Map<string, PendingHolding>();
  readonly #counters = new Map<string, number>();
  readonly #listed = new Set<Incarnation>();
  readonly #usedPorts = new Set<number>();
  readonly #links = new Map<string, TcpProxy[]>();
  readonly #exposures = new Map<Incarnation, NetnsExposure>();
  #netns: NetnsNodeLink | undefined;
  readonly #restartDelayMs: number;
  readonly #useLinks: boolean;
  readonly #timer: NodeJS.Timeout;
  #restarts = 0;
  #spareRestarts = 0;
  #phase: SupervisorPhase = { t: 'supervising' };
  #listText = '';
  // Writes are chained, so two list changes in one tick cannot race on the temp file.
  #writing: Promise<void> = Promise.resolve();

  constructor(o: NodeFleetOptions) {
    this.#o = o;
    this.positions = Array.from({ length: o.nodes }, (_, i) => `n${i + 1}`);
    this.nodesFile = join(o.dir, 'nodes.json');
    this.builds = { tree: treeBuild(o.serverMain), previous: o.previous };
    this.#restartDelayMs = o.restartDelayMs ?? 2000;
    this.#useLinks = o.etcdLinks ?? true;
    this.#timer = setInterval(() => this.poll(), 100);
    this.#timer.unref();
  }

  restarts(): number {
    return this.#restarts;
  }

  spareRestarts(): number {
    return this.#spareRestarts;
  }

  buildOf(position: string): ServerBuild {
    return this.#buildOf.get(position) ?? this.builds.tree;
  }

  setBuild(position: string, build: ServerBuild): void {
    this.#buildOf.set(position, build);
  }

  async startAll(): Promise<void> {
    await this.#writeList();
    if (this.#useLinks) await this.#openLinks();
    const ns = this.#o.netns;
    if (ns !== undefined) {
      this.#netns = await createNetnsNodeLink({
        etcdTargets: this.#useLinks ? this.#linkOf(ns.position).map((p) => p.address) : this.#o.etcd.map(hostPortOf),
        relayMain: ns.relayMain,
      });
      this.#o.say(
        `  ${ns.position} runs in its own network namespace, reaching etcd through a router namespace (--netns)`,
      );
    }
    for (const p of this.positions) await this.start(p);
  }

  async waitReady(n: number, timeoutMs: number): Promise<void> {
    const t0 = Date.now();
    for (;;) {
      this.poll();
      const ready = this.incarnations.filter((i) => i.readyMs !== undefined && i.exitedMs === undefined).length;
      if (ready >= n) return;
      if (Date.now() - t0 > timeoutMs) {
        const tails = this.incarnations.map((i) => `--- ${i.name}\n${i.handle.tail(8)}`).join('\n');
        throw new Error(`only ${ready} of ${n} nodes ready after ${timeoutMs} ms; last output:\n${tails}`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  current(position: string): Incarnation | undefined {
    return this.incarnations.find(
      (i) => i.position === position && i.exitedMs === undefined && i.handle.exitStatus() === undefined,
    );
  }

  async start(position: string): Promise<Incarnation> {
    this.#starting.add(position);
    try {
      return await this.#start(position);
    } finally {
      this.#starting.delete(position);
    }
  }

  async #start(position: string): Promise<Incarnation> {
    const n = (this.#counters.get(position) ?? 0) + 1;
    this.#counters.set(position, n);
    const name = `${position}#${n}`;
    await writeFile(this.#clockFile(position), '+0\n');
    const exposure =
      this.#netns !== undefined && position === this.#o.netns?.position
        ? await this.#netns.expose(() => this.#port())
        : undefined;
    const listenPort = exposure === undefined ? await this.#port() : 0;
    const metricsPort = exposure === undefined ? await this.#port() : 0;
    const address = exposure?.address ?? `127.0.0.1:${listenPort}`;
    const build = this.buildOf(position);
    const handle = this.#spawn(build, position, n, {
      listen: exposure?.listen ?? address,
      metrics: exposure?.metricsListen ?? `127.0.0.1:${metricsPort}`,
    });
    const inc: Incarnation = {
      name,
      position,
      url: `http://${address}`,
      address,
      metricsUrl: exposure?.metricsUrl ?? `http://127.0.0.1:${metricsPort}/metrics`,
      handle,
      version: build.version,
      spawnedMs: Date.now(),
      readyMs: undefined,
      exitedMs: undefined,
      exitCode: undefined,
      exitSignal: undefined,
      expectedExit: false,
      paused: false,
      worker: undefined,
      metrics: NO_METRICS,
      lastError: undefined,
      stdoutSeen: 0,
      stderrSeen: 0,
      finalized: false,
      log: createWriteStream(join(this.#o.dir, `node-${name.replace('#', '-')}.log`)),
    };
    this.incarnations.push(inc);
    if (exposure !== undefined) this.#exposures.set(inc, exposure);
    return inc;
  }

  async serving(): Promise<Incarnation[]> {
    const live = this.positions
      .map((p) => this.current(p))
      .filter((i): i is Incarnation => i !== undefined && !i.paused);
    const answers = await Promise.all(live.map(async (i) => ({ i, r: await fetchText(`${i.url}/readyz`, 1000) })));
    return answers.filter((a) => a.r?.status === 200).map((a) => a.i);
  }

  cutEtcd(position: string): void {
    for (const p of this.#linkOf(position)) p.cut();
  }

  restoreEtcd(position: string): void {
    for (const p of this.#linkOf(position)) p.restore();
  }

  setEtcdLatency(ms: number): void {
    for (const l of this.#links.values()) for (const p of l) p.setLatency(ms);
  }

  etcdCut(position: string): boolean {
    return (
      (this.#useLinks && this.#linkOf(position).some((p) => p.isCut)) ||
      (position === this.netnsPosition && this.#netns?.isCut() === true)
    );
  }

  get netnsPosition(): string | undefined {
    return this.#netns === undefined ? undefined : this.#o.netns?.position;
  }

  netnsCut(): void {
    if (this.#netns === undefined) throw new Error('no netns position (--netns)');
    this.#netns.cut();
  }

  netnsHeal(): void {
    if (this.#netns?.isCut() === true) this.#netns.heal();
  }

  async setClock(position: string, offset: string): Promise<void> {
    await writeFile(this.#clockFile(position), `${offset}\n`);
  }

  async scrape(inc: Incarnation): Promise<void> {
    if (inc.paused || inc.exitedMs !== undefined) return;
    const r = await fetchText(inc.metricsUrl, 1500);
    if (r !== undefined && r.status === 200) inc.metrics = parseNodeMetrics(r.text);
  }

  async scrapeAll(): Promise<void> {
    await Promise.all(this.incarnations.filter((i) => i.exitedMs === undefined).map((i) => this.scrape(i)));
  }

  poll(): void {
    const now = Date.now();
    for (const inc of this.incarnations) if (!inc.finalized) this.#pollOne(inc, now);
  }

  async stopAll(graceMs: number): Promise<void> {
    this.#phase = { t: 'stopped' };
    for (const i of this.incarnations) i.expectedExit = true;
    await Promise.all(this.incarnations.filter((i) => i.exitedMs === undefined).map((i) => i.handle.stop(graceMs)));
    this.poll();
    await new Promise((r) => setTimeout(r, 1100));
    this.poll();
    clearInterval(this.#timer);
    await Promise.all([...this.#links.values()].flat().map((p) => p.close()));
    this.netnsHeal();
    await this.#netns?.destroy();
    for (const i of this.incarnations) {
      if (!i.finalized) {
        i.finalized = true;
        i.log.end();
      }
    }
  }

  /** One TCP proxy per position and etcd member (issue 12); their ports are never handed to a node. */
  async #openLinks(): Promise<void> {
    for (const p of this.positions) {
      const proxies: TcpProxy[] = [];
      for (const e of this.#o.etcd) {
        const proxy = await createTcpProxy({ target: e.replace(/^[a-z]+:\/\//, '') });
        this.#usedPorts.add(proxy.port);
        proxies.push(proxy);
      }
      this.#links.set(p, proxies);
    }
  }

  #linkOf(position: string): TcpProxy[] {
    const l = this.#links.get(position);
    if (l === undefined) throw new Error(`no etcd link for ${position}`);
    return l;
  }

  #etcdOf(position: string): string {
    if (this.#netns !== undefined && position === this.#o.netns?.position) return this.#netns.etcd;
    return this.#useLinks
      ? this.#linkOf(position)
          .map((p) => `http://${p.address}`)
          .join(',')
      : this.#o.etcd.join(',');
  }

  #clockFile(position: string): string {
    return join(this.#o.dir, `clock-${position}`);
  }

  async #port(): Promise<number> {
    for (;;) {
      const p = await freePort();
      // Never reuse a port within a run: a URL must name exactly one process.
      if (!this.#usedPorts.has(p)) {
        this.#usedPorts.add(p);
        return p;
      }
    }
  }

  /**
   * One `idgen-server` process of `build` under libfaketime, its wall clock read from the position's control file; the
   * netns position's inside its namespace (`ip netns exec` execs the node: the pid, and so every signal, is the node's).
   * A previous release gets the same flags: 0.1.0 knows every one of them.
   */
  #spawn(build: ServerBuild, position: string, n: number, at: { listen: string; metrics: string }): ProcessHandle {
    const o = this.#o;
    const spawn =
      this.#netns !== undefined && position === o.netns?.position
        ? (cmd: string, args: string[], opts: { env: NodeJS.ProcessEnv; maxLines: number }) =>
            (this.#netns as NetnsNodeLink).spawn(cmd, args, opts.env, opts.maxLines)
        : spawnProcess;
    return spawn(
      process.execPath,
      [
        ...build.command,
        '--region',
        String(o.region),
        '--etcd',
        this.#etcdOf(position),
        '--listen',
        at.listen,
        '--metrics-listen',
        at.metrics,
        '--workers',
        `0-${o.slots - 1}`,
        '--lease-ttl',
        String(o.leaseTtlSeconds),
        '--time-source',
        'none',
        '--node-id',
        `chaos-${position}-${n}`,
      ],
      {
        env: {
          ...process.env,
          // docs/toolchain.md "Clock faults": wall clock from the control file, monotonic clock untouched.
          LD_PRELOAD: o.faketimeLib,
          FAKETIME_TIMESTAMP_FILE: this.#clockFile(position),
          FAKETIME_NO_CACHE: '1',
          DONT_FAKE_MONOTONIC: '1',
        },
        maxLines: 1_000_000,
      },
    );
  }

  #writeList(): Promise<void> {
    this.#writing = this.#writing.then(async () => {
      const text = JSON.stringify([...this.#listed].map((i) => ({ address: i.address, region: this.#o.region })));
      if (text === this.#listText) return;
      this.#listText = text;
      const tmp = `${this.nodesFile}.tmp`;
      await writeFile(tmp, text);
      await rename(tmp, this.nodesFile); // atomic: a caller never reads half a list
    });
    return this.#writing;
  }

  #unlist(inc: Incarnation): void {
    this.#listed.delete(inc);
    void this.#writeList();
  }

  #addHolding(inc: Incarnation, worker: number, leaseId: string, floorMs: number | undefined, now: number): void {
    const key = `${inc.name}|${worker}|${leaseId}`;
    if (this.#holdingIndex.has(key)) return;
    if (floorMs === undefined) {
      if (!this.#pendingFloor.has(key))
        this.#pendingFloor.set(key, { name: inc.name, url: inc.url, worker, leaseId, seenMs: now });
      return;
    }
    const pending = this.#pendingFloor.get(key);
    this.#pendingFloor.delete(key);
    this.#holdingIndex.set(key, this.holdings.length);
    this.holdings.push({ node: inc.url, name: inc.name, worker, leaseId, floorMs, seenMs: pending?.seenMs ?? now });
  }

  /** Reads one JSON log line: readiness, a holding (rule 2), a fence, or the last error. */
  #onLine(inc: Incarnation, line: string, now: number): void {
    let j: LogLine;
    try {
      j = JSON.parse(line) as LogLine;
    } catch {
      return;
    }
    const msg = typeof j.msg === 'string' ? j.msg : '';
    if (msg === 'ready' && inc.readyMs === undefined) {
      inc.readyMs = now;
      this.#listed.add(inc);
      void this.#writeList();
    }
    if (msg === 'lease: alive' && typeof j.worker === 'number' && typeof j.leaseId === 'string') {
      inc.worker = j.worker;
      this.#addHolding(inc, j.worker, j.leaseId, floorOf(j), now);
    }
    if (msg === 'guard: fenced' || msg === 'lease: fenced') {
      if (msg === 'lease: fenced') inc.worker = undefined;
      const reason = typeof j.reason === 'string' ? j.reason : msg === 'lease: fenced' ? 'lease' : 'unknown';
      this.fences.push({ name: inc.name, reason, atMs: now, source: msg === 'guard: fenced' ? 'guard' : 'lease' });
    }
    if (j.level === 'error' || j.level === 'fatal') inc.lastError = errorOf(j, msg);
  }

  /** New output of one process into its log file and {@link #onLine}; then its exit, if it exited. */
  #pollOne(inc: Incarnation, now: number): void {
    const out = inc.handle.stdoutLines;
    for (; inc.stdoutSeen < out.length; inc.stdoutSeen++) {
      const line = out[inc.stdoutSeen] as string;
      inc.log.write(`${line}\n`);
      this.#onLine(inc, line, now);
    }
    const err = inc.handle.stderrLines;
    for (; inc.stderrSeen < err.length; inc.stderrSeen++) inc.log.write(`[stderr] ${err[inc.stderrSeen] as string}\n`);
    const status = inc.handle.exitStatus();
    if (status !== undefined && inc.exitedMs !== undefined && now - inc.exitedMs > 1000) {
      inc.finalized = true;
      inc.log.end(`[chaos] exited code ${status.code} signal ${status.signal}\n`);
    }
    if (status !== undefined && inc.exitedMs === undefined) this.#onExit(inc, status, now);
  }

  /** A process just exited: out of the node list (at once or after its lease), restarted unless expected. */
  #onExit(inc: Incarnation, status: NonNullable<ReturnType<ProcessHandle['exitStatus']>>, now: number): void {
    inc.exitedMs = now;
    // A netns node's root-namespace ports die with it: its URL names exactly one process.
    const exposure = this.#exposures.get(inc);
    if (exposure !== undefined) {
      this.#exposures.delete(inc);
      void exposure.close();
    }
    inc.exitCode = status.code;
    inc.exitSignal = status.signal;
    inc.worker = undefined;
    // A cleanly stopped node deregistered itself; a dead one stays in discovery until its lease
    // expires (docs/design.md §5: the nodes key is bound to the lease), as etcd discovery would show it.
    if (status.code === 0) this.#unlist(inc);
    else setTimeout(() => this.#unlist(inc), this.#o.leaseTtlSeconds * 1000).unref();
    if (inc.expectedExit || this.#phase.t !== 'supervising') return;
    this.#restarts++;
    // A spare finding every slot taken at boot exits by design (the lease fails fast at start-up):
    // counted, not printed every time.
    if (inc.lastError?.includes('NoFreeWorkerError') === true) this.#spareRestarts++;
    else
      this.#o.say(
        `  supervisor: ${inc.name} exited (code ${status.code}, signal ${status.signal}${inc.lastError ? `: ${inc.lastError}` : ''}); restarting in ${this.#restartDelayMs} ms`,
      );
    setTimeout(() => {
      if (
        this.#phase.t === 'supervising' &&
        this.current(inc.position) === undefined &&
        !this.#starting.has(inc.position)
      )
        void this.start(inc.position).catch(() => undefined);
    }, this.#restartDelayMs).unref();
  }
}

/** `host:port` of an etcd URL. */
function hostPortOf(url: string): string {
  return url.replace(/^[a-z]+:\/\//, '');
}

/** Creates the fleet (starts nothing yet). */
export function createNodeFleet(o: NodeFleetOptions): NodeFleet {
  return new ChaosNodeFleet(o);
}
