/**
 * One chaos run as named steps (issue 7): {@link ChaosRun.setUp} starts etcd, the nodes and the callers;
 * {@link ChaosRun.runSchedule} runs the load and the seeded faults one at a time (each kind's handler in
 * src/faults/index.ts); {@link ChaosRun.tearDown} stops everything and audits the run's etcd;
 * {@link ChaosRun.judge} verifies every ID (src/run-verdict.ts). A class rather than one closure (the house rule:
 * past ~150 lines a closure becomes named parts), so each step can be read alone and a stack trace names it.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createConnectTransport } from '@idgen/client';
import {
  bindRegion,
  startEtcdCluster,
  spawnProcess,
  tempDir,
  type EtcdCluster,
  type ProcessHandle,
} from '@idgen/testing';
import { auditConfig, runAudit, type AuditOutcome } from './faults/audit.js';
import { ETCD_PREFIX, type FaultContext, type FaultRun, type MemberDown } from './fault-context.js';
import { FAULT_HANDLERS } from './faults/index.js';
import { createEmbeddedFleet, type EmbeddedFleet } from './embedded-fleet.js';
import { createNodeFleet, type Incarnation, type NodeFleet } from './node-fleet.js';
import { probeBlocksFile, type BlockLine } from './records.js';
import {
  REGION_CALLERS,
  REGION_NODES,
  fallbackFlags,
  startRegion,
  type RegionOutage,
  type RegionPart,
} from './regions.js';
import type { ChaosOptions, ChaosResult, FaultRecord } from './run.js';
import { judgeRun, type CallerSummary } from './run-verdict.js';
import { createSchedule, type Fault, type Schedule } from './schedule.js';
import { previousBuild } from './server-build.js';
import { sleep } from './sleep.js';
import type { ClockAllowance } from './verify.js';

/** Longest a fault waits for the previous one to be recovered from (fewer nodes serving than slots). */
const SETTLE_LIMIT_MS = 20_000;

/** Load after the last fault ends, at least. */
const TAIL_MS = 3000;

/** What {@link ChaosRun.tearDown} collected. */
interface Stopped {
  readonly callerSummaries: CallerSummary[];
  readonly audit: AuditOutcome;
}

/**
 * The parts set up once: the run directory, etcd, the fleets and the callers. One object, built by
 * {@link ChaosRun.setUp}, so a run has no half-set-up fields.
 */
interface Parts {
  readonly dir: string;
  readonly cluster: EtcdCluster;
  readonly fleet: NodeFleet;
  /** Every caller, by index (region 1's first, then each further region's). */
  readonly callers: readonly ProcessHandle[];
  /** The home region of each caller, by index. */
  readonly callerHomes: readonly number[];
  readonly embedded: EmbeddedFleet | undefined;
  /** The further regions (`--regions` ≥ 2; src/regions.ts), empty otherwise. */
  readonly regions: readonly RegionPart[];
}

/** The load phase's own parts (from its start until the probe file is closed). */
interface Load {
  readonly start: number;
  readonly probeOut: WriteStream;
  readonly scrapeTimer: NodeJS.Timeout;
}

/** One chaos run (see the module comment). */
export class ChaosRun implements FaultRun {
  readonly o: ChaosOptions;
  readonly faketimeLib: string;
  readonly ttlMs: number;
  readonly schedule: Schedule;
  readonly operatorCli: string;
  readonly records: FaultRecord[] = [];
  readonly skipped: Fault[] = [];
  readonly clockAllowances: ClockAllowance[] = [];
  /** When each `etcd-member-down` had its member stopped (judged in {@link judge}, with the window's failed calls). */
  readonly memberDowns = new Map<FaultRecord, MemberDown>();
  /** When each region fault took its region away and gave it back. */
  readonly regionOutages = new Map<FaultRecord, RegionOutage>();
  #parts: Parts | undefined;
  #load: Load | undefined;
  #wrongRegionNodes = 0;

  constructor(o: ChaosOptions, faketimeLib: string) {
    this.o = o;
    this.faketimeLib = faketimeLib;
    this.ttlMs = o.leaseTtlSeconds * 1000;
    this.schedule = createSchedule({
      durationMs: o.durationMs,
      seed: o.seed,
      leaseTtlMs: this.ttlMs,
      ...(o.kinds !== undefined ? { kinds: o.kinds } : {}),
      ...(o.regions !== undefined ? { regions: o.regions } : {}),
      ...(o.netns === true ? { netns: true } : {}),
      optIn: o.previousServer !== undefined,
    });
    this.operatorCli = o.operatorCliMain ?? o.cliMain;
  }

  get dir(): string {
    return this.#set().dir;
  }

  get cluster(): EtcdCluster {
    return this.#set().cluster;
  }

  get fleet(): NodeFleet {
    return this.#set().fleet;
  }

  get regions(): readonly RegionPart[] {
    return this.#set().regions;
  }

  /** The run directory, a 3-member etcd cluster bound to the region, the nodes, the callers, the embedded callers. */
  async setUp(): Promise<void> {
    const o = this.o;
    const dir = await this.#runDir();
    o.say('starting a 3-member etcd cluster');
    const cluster: EtcdCluster = await startEtcdCluster(3, { readyTimeoutMs: 60_000 });
    o.say(`  etcd: ${cluster.endpoints.join(', ')}`);
    // The region's etcd is bound to its code before its first node, as idgen region init does (docs/design.md §5).
    // Its TTL ceiling is the run's TTL: no node starts on an etcd without one (docs/design.md §5, "The TTL ceiling").
    await bindRegion(cluster.endpoints[0] as string, o.region, undefined, { ttlCeilingSeconds: o.leaseTtlSeconds });
    o.say(`  bound to region ${o.region} (/idgen/region)`);
    const fleet = await this.#startNodes(dir, cluster);
    const regions = await this.#startRegions(dir);
    const { callers, callerHomes } = await this.#startCallers(dir, fleet, regions);
    const embedded = await this.#startEmbedded(dir, cluster);
    this.#parts = { dir, cluster, fleet, callers, callerHomes, embedded, regions };
  }

  /**
   * The load for its duration, with the schedule's faults one at a time (and the embedded callers' faults on
   * their own timeline). Returns the load's length in ms; throws `interrupted` when the run was aborted.
   */
  async runSchedule(): Promise<number> {
    const o = this.o;
    const { fleet, embedded, dir } = this.#set();
    const loadStart = Date.now();
    const scrapeTimer = setInterval(() => void fleet.scrapeAll(), 2000);
    const probeOut = createWriteStream(probeBlocksFile(dir), { flags: 'a' });
    this.#load = { start: loadStart, probeOut, scrapeTimer };
    o.say(`load running for ${(o.durationMs / 1000).toFixed(0)} s with ${this.schedule.faults.length} faults`);
    // The embedded callers' faults run on their own timeline, beside the nodes' (their slots are apart).
    const embeddedFaults =
      embedded?.runFaults({
        seed: o.seed,
        loadStart,
        untilMs: loadStart + o.durationMs - TAIL_MS,
        allowances: this.clockAllowances,
        signal: o.signal,
      }) ?? Promise.resolve();
    const lastEnd = await this.#runFaults(loadStart);
    // The load runs its duration, and at least the tail after a fault that started late.
    await this.sleep(Math.max(loadStart + o.durationMs, lastEnd + TAIL_MS) - Date.now());
    await new Promise<void>((resolve) => probeOut.end(resolve));
    await embeddedFaults.catch((e: unknown) =>
      o.say(`  embedded faults stopped: ${e instanceof Error ? e.message : String(e)}`),
    );
    if (o.signal.aborted) throw new Error('interrupted');
    return Date.now() - loadStart;
  }

  /** Stops the callers, the nodes and the embedded callers, audits the run's etcd, and stops etcd. */
  async tearDown(): Promise<Stopped> {
    const o = this.o;
    const { fleet, embedded, callers, cluster, dir, regions } = this.#set();
    o.say('stopping callers');
    const callerSummaries = await Promise.all(
      callers.map(async (c) => {
        await c.stop(15_000);
        const line = c.stdoutLines.find((l) => l.includes('caller stopped'));
        return line === undefined ? undefined : (JSON.parse(line) as NonNullable<CallerSummary>);
      }),
    );
    clearInterval(this.#loaded().scrapeTimer);
    await fleet.scrapeAll(); // the final scrape: every running node's counters (docs/design.md §2)
    if (embedded !== undefined) {
      o.say('stopping embedded callers');
      await embedded.stopAll(15_000);
    }
    o.say('stopping nodes');
    await Promise.all([fleet, ...regions.map((g) => g.fleet)].map((f) => f.stopAll(10_000)));
    // Everything that minted has stopped: the audit judges what the run's etcd holds, before it is torn down.
    o.say("the deployment audit of the run's etcds");
    const audit = await this.#audit(dir, cluster, regions);
    for (const l of audit.lines) o.say(`  ${l}`);
    o.say('stopping etcd');
    await Promise.all([cluster, ...regions.map((g) => g.cluster)].map((c) => c.stopAll()));
    return { callerSummaries, audit };
  }

  /** Verifies every ID received and judges each fault (src/run-verdict.ts). */
  judge(loadMs: number, stopped: Stopped): Promise<ChaosResult> {
    this.o.say('verifying');
    const { dir, fleet, embedded, regions, callerHomes } = this.#set();
    return judgeRun(this.o, {
      regions,
      regionOutages: this.regionOutages,
      callerHomes,
      schedule: this.schedule,
      loadStart: this.#loaded().start,
      loadMs,
      dir,
      records: this.records,
      skipped: this.skipped,
      fleet,
      embedded,
      callerSummaries: stopped.callerSummaries,
      clockAllowances: this.clockAllowances,
      memberDowns: this.memberDowns,
      audit: stopped.audit,
    });
  }

  nextWrongRegionName(): string {
    this.#wrongRegionNodes++;
    return `wrong-region-${this.#wrongRegionNodes}`;
  }

  sleep(ms: number): Promise<void> {
    return sleep(ms, this.o.signal);
  }

  async clockAhead(inc: Incarnation, seconds: number): Promise<ClockAllowance> {
    const a: ClockAllowance = {
      node: inc.url,
      fromMs: Date.now(),
      toMs: Number.POSITIVE_INFINITY,
      aheadMs: seconds * 1000,
    };
    this.clockAllowances.push(a);
    await this.fleet.setClock(inc.position, `+${seconds}`);
    return a;
  }

  async clockBack(inc: Incarnation, a: ClockAllowance): Promise<void> {
    await this.fleet.setClock(inc.position, '+0');
    a.toMs = Date.now() + 1000;
  }

  fencesOf(inc: Incarnation, fromMs: number, reason?: string): number {
    return this.fleet.fences.filter(
      (e) =>
        e.name === inc.name &&
        e.atMs >= fromMs &&
        e.source === 'guard' &&
        (reason === undefined || e.reason === reason),
    ).length;
  }

  /**
   * While a node's clock jumps, the run itself asks it for one ID after another, so the jump meets a mint:
   * a small jump is then really waited out and a large one really fenced (the callers' buffered refills
   * reach a node only a few times a second). Every block it gets is verified like a caller's. `until` is read
   * on every request: a fault that ends early moves it.
   */
  async probe(inc: Incarnation, until: number | { untilMs: number }): Promise<{ ok: number; failed: number }> {
    const stop = typeof until === 'number' ? { untilMs: until } : until;
    const probeOut = this.#loaded().probeOut;
    const transport = createConnectTransport({ url: inc.url, region: this.o.region });
    let ok = 0;
    let failed = 0;
    try {
      while (Date.now() < stop.untilMs && !this.o.signal.aborted) {
        try {
          const blocks = await transport.nextIds(1, { signal: AbortSignal.timeout(500), timeoutMs: 500 });
          const receivedMs = Date.now();
          for (const b of blocks) {
            const line: BlockLine = { node: inc.url, first: b.first.toString(), count: b.count, receivedMs };
            probeOut.write(`${JSON.stringify(line)}\n`);
          }
          ok++;
          // Back to back (one request in flight, ~1 ms on loopback): a jump of a few ms must meet a mint.
          await new Promise((r) => setImmediate(r));
        } catch {
          failed++;
          await this.sleep(2);
        }
      }
    } finally {
      transport.close();
    }
    return { ok, failed };
  }

  /** The schedule's faults in order, one at a time; returns when the last one ended (wall ms). */
  async #runFaults(loadStart: number): Promise<number> {
    const o = this.o;
    let lastEnd = loadStart;
    // A late fault still gets its whole window before the next one begins, so effects never overlap.
    let notBefore = loadStart;
    // Late starts are bounded: a fault not begun by 1.5 × the duration is skipped (and reported).
    const startBy = loadStart + o.durationMs * 1.5 - TAIL_MS;
    for (const f of this.schedule.faults) {
      if (o.signal.aborted) break;
      if (Date.now() > startBy) {
        this.skipped.push(f);
        continue;
      }
      const began = await this.#runFault(f, notBefore).catch((e: unknown) => {
        o.say(`  fault #${f.index} ${f.kind} failed to run: ${e instanceof Error ? e.message : String(e)}`);
        return Date.now();
      });
      notBefore = began + f.windowMs;
      lastEnd = Date.now();
    }
    return lastEnd;
  }

  /** One fault: at its time (or once the previous one is recovered from), recorded, run by its handler. */
  async #runFault(f: Fault, notBefore: number): Promise<number> {
    const o = this.o;
    const loadStart = this.#loaded().start;
    await this.sleep(Math.max(loadStart + f.atMs, notBefore) - Date.now());
    if (o.signal.aborted) return Date.now();
    const settled = await this.#settle();
    const begin = Date.now();
    if (o.signal.aborted) return begin;
    const r: FaultRecord = {
      fault: f,
      startedMs: begin - loadStart,
      endedMs: undefined,
      target: '-',
      notes: [
        `${settled.serving.length} serving${settled.waitedMs >= 500 ? ` (after waiting ${(settled.waitedMs / 1000).toFixed(1)} s for recovery)` : ''}`,
      ],
      servingAtStart: settled.serving.length,
      settleWaitMs: settled.waitedMs,
      expectationMissed: undefined,
      safetyViolation: undefined,
    };
    this.records.push(r);
    await FAULT_HANDLERS[f.kind](this.#context(f, r, begin));
    r.endedMs = Date.now() - loadStart;
    return begin;
  }

  /** What a fault's handler gets: this run, the fault, its record, and its small helpers. */
  #context(f: Fault, r: FaultRecord, begin: number): FaultContext {
    const line = (): void =>
      this.o.say(`  t+${(r.startedMs / 1000).toFixed(1)}s fault #${f.index} ${f.kind} → ${r.target}`);
    return {
      run: this,
      fault: f,
      record: r,
      begin,
      until: () => this.sleep(begin + f.effectMs - Date.now()),
      line,
      hitNode: async (noteWorker, position) => {
        const inc = position !== undefined ? this.fleet.current(position) : await this.#pickNode(f);
        if (inc === undefined) return undefined;
        r.target = inc.name;
        if (noteWorker) r.notes.push(`held worker ${inc.worker ?? '-'}`);
        line();
        await this.fleet.scrape(inc);
        return inc;
      },
    };
  }

  /** The fault's node among those serving, by its `pick` fraction. */
  async #pickNode(f: Fault): Promise<Incarnation | undefined> {
    const fleet = this.fleet;
    let candidates = await fleet.serving();
    // Nobody serving (an earlier fault still recovering): hit a running node anyway.
    if (candidates.length === 0) {
      candidates = fleet.positions
        .map((p) => fleet.current(p))
        .filter((i): i is Incarnation => i !== undefined && !i.paused);
    }
    candidates.sort((a, b) => a.position.localeCompare(b.position));
    return candidates[Math.floor(f.pick * candidates.length)];
  }

  /**
   * A fault starts at its planned time, or later if the previous one has not yet been recovered from
   * (fewer than `slots` nodes serving): a fault that hits a fleet still down shows nothing. Recovery
   * after a whole-cluster etcd stop can take longer than its window; the wait is bounded and reported.
   */
  async #settle(): Promise<{ serving: Incarnation[]; waitedMs: number }> {
    const t0 = Date.now();
    const want = Math.min(this.o.slots, this.o.nodes);
    for (;;) {
      const serving = await this.fleet.serving();
      // A further region taken away by the previous fault counts too: the next fault waits for its pool.
      const regionsBack = await this.#regionsServing();
      if ((serving.length >= want && regionsBack) || Date.now() - t0 >= SETTLE_LIMIT_MS || this.o.signal.aborted)
        return { serving, waitedMs: Date.now() - t0 };
      await this.sleep(250);
    }
  }

  /** `--out` (created if missing), or a temp dir the cleanup registry removes. */
  async #runDir(): Promise<string> {
    const o = this.o;
    let dir: string;
    if (o.outDir !== undefined) {
      await mkdir(o.outDir, { recursive: true });
      dir = o.outDir;
    } else {
      dir = (await tempDir('idgen-chaos')).path; // removed by the cleanup registry
    }
    o.say(`run directory: ${dir}${o.outDir === undefined ? ' (removed at the end; --out keeps it)' : ''}`);
    return dir;
  }

  /** The generator nodes under libfaketime, until `min(slots, nodes)` are ready. */
  async #startNodes(dir: string, cluster: EtcdCluster): Promise<NodeFleet> {
    const o = this.o;
    const fleet = createNodeFleet({
      serverMain: o.serverMain,
      ...(o.previousServer !== undefined ? { previous: previousBuild(o.previousServer) } : {}),
      faketimeLib: this.faketimeLib,
      dir,
      etcd: cluster.endpoints,
      region: o.region,
      nodes: o.nodes,
      slots: o.slots,
      leaseTtlSeconds: o.leaseTtlSeconds,
      ...(o.netns === true ? { netns: { position: 'n1', relayMain: o.relayMain } } : {}),
      say: o.say,
    });
    o.say(
      `starting ${o.nodes} generator nodes (workers 0-${o.slots - 1}, lease TTL ${o.leaseTtlSeconds} s, under libfaketime)`,
    );
    await fleet.startAll();
    await fleet.waitReady(Math.min(o.slots, o.nodes), 90_000);
    o.say(
      `  ready: ${fleet.incarnations
        .filter((i) => i.readyMs !== undefined)
        .map((i) => `${i.name} ${i.url}`)
        .join(', ')}`,
    );
    return fleet;
  }

  /** Whether every further region has its whole pool serving again. */
  async #regionsServing(): Promise<boolean> {
    const regions = this.#set().regions;
    const serving = await Promise.all(regions.map((g) => g.fleet.serving()));
    return serving.every((s) => s.length >= REGION_NODES);
  }

  /** The further regions of a run over regions (codes 2 … N, src/regions.ts), started side by side. */
  async #startRegions(dir: string): Promise<RegionPart[]> {
    const o = this.o;
    const n = o.regions ?? 1;
    if (n < 2) return [];
    o.say(`starting ${n - 1} further regions (each a one-member etcd bound to its code, ${REGION_NODES} nodes)`);
    return Promise.all(
      Array.from({ length: n - 1 }, (_, k) =>
        startRegion({
          code: o.region + 1 + k,
          dir,
          serverMain: o.serverMain,
          faketimeLib: this.faketimeLib,
          leaseTtlSeconds: o.leaseTtlSeconds,
          say: o.say,
        }),
      ),
    );
  }

  /**
   * The caller processes (src/caller.ts), each minting `rate` IDs/s from the nodes in its home region's list: region
   * 1's `callers`, then (over regions) {@link REGION_CALLERS} per further region, each with every other region as a
   * fallback.
   */
  async #startCallers(
    dir: string,
    fleet: NodeFleet,
    regions: RegionPart[],
  ): Promise<{ callers: ProcessHandle[]; callerHomes: number[] }> {
    const o = this.o;
    const files = [
      { code: o.region, nodesFile: fleet.nodesFile },
      ...regions.map((g) => ({ code: g.code, nodesFile: g.fleet.nodesFile })),
    ];
    const homes = Array.from({ length: o.callers }, () => ({ code: o.region, nodesFile: fleet.nodesFile }));
    for (const g of regions)
      for (let k = 0; k < Math.min(o.callers, REGION_CALLERS); k++) {
        g.callerIndexes.push(homes.length);
        homes.push({ code: g.code, nodesFile: g.fleet.nodesFile });
      }
    o.say(`starting ${homes.length} callers at ${o.rate} IDs/s each`);
    const callers: ProcessHandle[] = [];
    for (const [i, home] of homes.entries()) {
      callers.push(
        spawnProcess(process.execPath, [
          o.callerMain,
          '--index',
          String(i),
          '--dir',
          dir,
          '--nodes-file',
          home.nodesFile,
          '--region',
          String(home.code),
          '--rate',
          String(o.rate),
          '--batch',
          '10',
          ...(regions.length > 0 ? fallbackFlags(home.code, files) : []),
        ]),
      );
    }
    await Promise.all(callers.map((c) => c.waitForLine(/caller started/, 30_000)));
    for (const g of regions) g.callers = g.callerIndexes.map((i) => callers[i] as ProcessHandle);
    return { callers, callerHomes: homes.map((h) => h.code) };
  }

  /** The embedded callers (slots 18 and up, one a spare), when asked for, until all but the spare hold a slot. */
  async #startEmbedded(dir: string, cluster: EtcdCluster): Promise<EmbeddedFleet | undefined> {
    const o = this.o;
    if (o.embedded <= 0) return undefined;
    const embedded = createEmbeddedFleet({
      callerMain: o.embeddedMain,
      faketimeLib: this.faketimeLib,
      dir,
      etcd: cluster.endpoints,
      region: o.region,
      count: o.embedded,
      firstWorker: 18,
      rate: o.rate,
      leaseTtlSeconds: o.leaseTtlSeconds,
      say: o.say,
    });
    o.say(
      `starting ${o.embedded} embedded callers (@idgen/embedded, slots ${embedded.workers}: one is a spare) at ${o.rate} IDs/s each, under libfaketime`,
    );
    await embedded.startAll();
    await embedded.waitHolding(o.embedded - 1, 90_000);
    return embedded;
  }

  /**
   * The deployment audit over the run's etcds (`auditDeployment` of @idgen/lease/records, in process): the run's
   * region (the nodes' and the embedded callers') and each further region's.
   */
  async #audit(dir: string, cluster: EtcdCluster, regions: readonly RegionPart[]): Promise<AuditOutcome> {
    const o = this.o;
    const auditRegions = [
      { name: `region-${o.region}`, etcd: cluster.endpoints, prefix: ETCD_PREFIX },
      ...regions.map((g) => ({ name: `region-${g.code}`, etcd: g.cluster.endpoints, prefix: ETCD_PREFIX })),
    ];
    // The deployment file of the run's etcds, for `idgen audit --config` by hand while a run is held open.
    await writeFile(join(dir, 'audit.json'), auditConfig(auditRegions));
    return runAudit({ regions: auditRegions, timeoutMs: 5000 });
  }

  #set(): Parts {
    if (this.#parts === undefined) throw new Error('the chaos run is not set up (setUp first)');
    return this.#parts;
  }

  #loaded(): Load {
    if (this.#load === undefined) throw new Error('the chaos run has no load yet (runSchedule first)');
    return this.#load;
  }
}
