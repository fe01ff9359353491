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
import {
  createTcpProxy,
  freePort,
  serverLaunchArgs,
  spawnProcess,
  type ProcessHandle,
  type TcpProxy,
} from '@idgen/testing';
import { NO_METRICS, parseNodeMetrics, type NodeMetrics } from './node-metrics.js';
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
  /** Starts a new process on `position` (clock control reset to +0). */
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

/** Creates the fleet (starts nothing yet). */
export function createNodeFleet(o: NodeFleetOptions): NodeFleet {
  const positions = Array.from({ length: o.nodes }, (_, i) => `n${i + 1}`);
  const nodesFile = join(o.dir, 'nodes.json');
  const incarnations: Incarnation[] = [];
  const holdings: Holding[] = [];
  const holdingIndex = new Map<string, number>();
  const pendingFloor = new Map<
    string,
    { name: string; url: string; worker: number; leaseId: string; seenMs: number }
  >();
  const fences: FenceEvent[] = [];
  const counters = new Map<string, number>();
  const listed = new Set<Incarnation>();
  const usedPorts = new Set<number>();
  let restarts = 0;
  let spareRestarts = 0;
  let supervising = true;
  let listText = '';
  const restartDelayMs = o.restartDelayMs ?? 2000;
  const useLinks = o.etcdLinks ?? true;
  const links = new Map<string, TcpProxy[]>();
  const linkOf = (position: string): TcpProxy[] => {
    const l = links.get(position);
    if (l === undefined) throw new Error(`no etcd link for ${position}`);
    return l;
  };
  const etcdOf = (position: string): string =>
    useLinks
      ? linkOf(position)
          .map((p) => `http://${p.address}`)
          .join(',')
      : o.etcd.join(',');

  const port = async (): Promise<number> => {
    for (;;) {
      const p = await freePort();
      // Never reuse a port within a run: a URL must name exactly one process.
      if (!usedPorts.has(p)) {
        usedPorts.add(p);
        return p;
      }
    }
  };

  // Writes are chained, so two list changes in one tick cannot race on the temp file.
  let writing: Promise<void> = Promise.resolve();
  const writeList = (): Promise<void> => {
    writing = writing.then(async () => {
      const text = JSON.stringify([...listed].map((i) => ({ address: i.address, region: o.region })));
      if (text === listText) return;
      listText = text;
      const tmp = `${nodesFile}.tmp`;
      await writeFile(tmp, text);
      await rename(tmp, nodesFile); // atomic: a caller never reads half a list
    });
    return writing;
  };

  const addHolding = (
    inc: Incarnation,
    worker: number,
    leaseId: string,
    floorMs: number | undefined,
    now: number,
  ): void => {
    const key = `${inc.name}|${worker}|${leaseId}`;
    if (holdingIndex.has(key)) return;
    if (floorMs === undefined) {
      if (!pendingFloor.has(key)) pendingFloor.set(key, { name: inc.name, url: inc.url, worker, leaseId, seenMs: now });
      return;
    }
    const pending = pendingFloor.get(key);
    pendingFloor.delete(key);
    holdingIndex.set(key, holdings.length);
    holdings.push({ node: inc.url, name: inc.name, worker, leaseId, floorMs, seenMs: pending?.seenMs ?? now });
  };

  const onLine = (inc: Incarnation, line: string, now: number): void => {
    let j: LogLine;
    try {
      j = JSON.parse(line) as LogLine;
    } catch {
      return;
    }
    const msg = typeof j.msg === 'string' ? j.msg : '';
    if (msg === 'ready' && inc.readyMs === undefined) {
      inc.readyMs = now;
      listed.add(inc);
      void writeList();
    }
    if (msg === 'lease: alive' && typeof j.worker === 'number' && typeof j.leaseId === 'string') {
      let floor = typeof j.floorMs === 'number' ? j.floorMs : undefined;
      if (floor === undefined && typeof j.detail === 'string') {
        const m = /minting above (\d+)/.exec(j.detail);
        if (m !== null) floor = Number(m[1]);
      }
      inc.worker = j.worker;
      addHolding(inc, j.worker, j.leaseId, floor, now);
    }
    if (msg === 'guard: fenced' || msg === 'lease: fenced') {
      if (msg === 'lease: fenced') inc.worker = undefined;
      const reason = typeof j.reason === 'string' ? j.reason : msg === 'lease: fenced' ? 'lease' : 'unknown';
      fences.push({ name: inc.name, reason, atMs: now, source: msg === 'guard: fenced' ? 'guard' : 'lease' });
    }
    if (j.level === 'error' || j.level === 'fatal') {
      const err = j.err as { type?: unknown; message?: unknown } | string | undefined;
      const detail =
        typeof err === 'string'
          ? err
          : typeof err?.type === 'string'
            ? `${err.type}: ${String(err.message).slice(0, 160)}`
            : undefined;
      inc.lastError = detail === undefined ? msg : `${msg}: ${detail}`;
    }
  };

  const poll = (): void => {
    const now = Date.now();
    for (const inc of incarnations) {
      if (inc.finalized) continue;
      const out = inc.handle.stdoutLines;
      for (; inc.stdoutSeen < out.length; inc.stdoutSeen++) {
        const line = out[inc.stdoutSeen] as string;
        inc.log.write(`${line}\n`);
        onLine(inc, line, now);
      }
      const err = inc.handle.stderrLines;
      for (; inc.stderrSeen < err.length; inc.stderrSeen++)
        inc.log.write(`[stderr] ${err[inc.stderrSeen] as string}\n`);
      const status = inc.handle.exitStatus();
      if (status !== undefined && inc.exitedMs !== undefined && now - inc.exitedMs > 1000) {
        inc.finalized = true;
        inc.log.end(`[chaos] exited code ${status.code} signal ${status.signal}\n`);
      }
      if (status !== undefined && inc.exitedMs === undefined) {
        inc.exitedMs = now;
        inc.exitCode = status.code;
        inc.exitSignal = status.signal;
        inc.worker = undefined;
        // A cleanly stopped node deregistered itself; a dead one stays in discovery until its lease
        // expires (docs/design.md §5: the nodes key is bound to the lease), as etcd discovery would show it.
        const unlist = (): void => {
          listed.delete(inc);
          void writeList();
        };
        if (status.code === 0) unlist();
        else setTimeout(unlist, o.leaseTtlSeconds * 1000).unref();
        if (!inc.expectedExit && supervising) {
          restarts++;
          // A spare finding every slot taken at boot exits by design (the lease fails fast at start-up):
          // counted, not printed every time.
          if (inc.lastError?.includes('NoFreeWorkerError') === true) spareRestarts++;
          else
            o.say(
              `  supervisor: ${inc.name} exited (code ${status.code}, signal ${status.signal}${inc.lastError ? `: ${inc.lastError}` : ''}); restarting in ${restartDelayMs} ms`,
            );
          setTimeout(() => {
            if (supervising && current(inc.position) === undefined) void start(inc.position).catch(() => undefined);
          }, restartDelayMs).unref();
        }
      }
    }
  };
  const timer = setInterval(poll, 100);
  timer.unref();

  const clockFile = (position: string): string => join(o.dir, `clock-${position}`);

  const current = (position: string): Incarnation | undefined =>
    incarnations.find(
      (i) => i.position === position && i.exitedMs === undefined && i.handle.exitStatus() === undefined,
    );

  const start = async (position: string): Promise<Incarnation> => {
    const n = (counters.get(position) ?? 0) + 1;
    counters.set(position, n);
    const name = `${position}#${n}`;
    await writeFile(clockFile(position), '+0\n');
    const listenPort = await port();
    const metricsPort = await port();
    const address = `127.0.0.1:${listenPort}`;
    const handle = spawnProcess(
      process.execPath,
      [
        ...serverLaunchArgs(o.serverMain),
        '--region',
        String(o.region),
        '--etcd',
        etcdOf(position),
        '--listen',
        address,
        '--metrics-listen',
        `127.0.0.1:${metricsPort}`,
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
          FAKETIME_TIMESTAMP_FILE: clockFile(position),
          FAKETIME_NO_CACHE: '1',
          DONT_FAKE_MONOTONIC: '1',
        },
        maxLines: 1_000_000,
      },
    );
    const inc: Incarnation = {
      name,
      position,
      url: `http://${address}`,
      address,
      metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
      handle,
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
      log: createWriteStream(join(o.dir, `node-${name.replace('#', '-')}.log`)),
    };
    incarnations.push(inc);
    return inc;
  };

  const fetchText = async (url: string, timeoutMs: number): Promise<{ status: number; text: string } | undefined> => {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      return { status: res.status, text: await res.text() };
    } catch {
      return undefined;
    }
  };

  const scrape = async (inc: Incarnation): Promise<void> => {
    if (inc.paused || inc.exitedMs !== undefined) return;
    const r = await fetchText(inc.metricsUrl, 1500);
    if (r !== undefined && r.status === 200) inc.metrics = parseNodeMetrics(r.text);
  };

  return {
    nodesFile,
    positions,
    incarnations,
    holdings,
    fences,
    restarts: () => restarts,
    spareRestarts: () => spareRestarts,
    async startAll() {
      await writeList();
      if (useLinks) {
        for (const p of positions) {
          const proxies: TcpProxy[] = [];
          for (const e of o.etcd) {
            const proxy = await createTcpProxy({ target: e.replace(/^[a-z]+:\/\//, '') });
            usedPorts.add(proxy.port);
            proxies.push(proxy);
          }
          links.set(p, proxies);
        }
      }
      for (const p of positions) await start(p);
    },
    async waitReady(n, timeoutMs) {
      const t0 = Date.now();
      for (;;) {
        poll();
        const ready = incarnations.filter((i) => i.readyMs !== undefined && i.exitedMs === undefined).length;
        if (ready >= n) return;
        if (Date.now() - t0 > timeoutMs) {
          const tails = incarnations.map((i) => `--- ${i.name}\n${i.handle.tail(8)}`).join('\n');
          throw new Error(`only ${ready} of ${n} nodes ready after ${timeoutMs} ms; last output:\n${tails}`);
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    current,
    start,
    async serving() {
      const live = positions.map(current).filter((i): i is Incarnation => i !== undefined && !i.paused);
      const answers = await Promise.all(live.map(async (i) => ({ i, r: await fetchText(`${i.url}/readyz`, 1000) })));
      return answers.filter((a) => a.r?.status === 200).map((a) => a.i);
    },
    cutEtcd(position) {
      for (const p of linkOf(position)) p.cut();
    },
    restoreEtcd(position) {
      for (const p of linkOf(position)) p.restore();
    },
    setEtcdLatency(ms) {
      for (const l of links.values()) for (const p of l) p.setLatency(ms);
    },
    etcdCut(position) {
      return useLinks && linkOf(position).some((p) => p.isCut);
    },
    async setClock(position, offset) {
      await writeFile(clockFile(position), `${offset}\n`);
    },
    scrape,
    async scrapeAll() {
      await Promise.all(incarnations.filter((i) => i.exitedMs === undefined).map(scrape));
    },
    poll,
    async stopAll(graceMs) {
      supervising = false;
      for (const i of incarnations) i.expectedExit = true;
      await Promise.all(incarnations.filter((i) => i.exitedMs === undefined).map((i) => i.handle.stop(graceMs)));
      poll();
      await new Promise((r) => setTimeout(r, 1100));
      poll();
      clearInterval(timer);
      await Promise.all([...links.values()].flat().map((p) => p.close()));
      for (const i of incarnations) {
        if (!i.finalized) {
          i.finalized = true;
          i.log.end();
        }
      }
    },
  };
}
