// What the abuse suites share (abuse.spec.ts, abuse-serving.spec.ts): a probe client making one NextIds call every
// 250 ms on a connection of its own while an attacker runs, and the server's RSS sampled with each probe. The
// bounds every attack must respect: RSS under 400 MB, at most 10% of the probes failing during it and none after,
// the process alive (docs/design.md §8 item 4).
//
// A probe fails when the node spends more than a second of its own CPU time without answering it: time the node
// gave the attacker instead of the probe. Not a second of wall time: on a machine busy with other work (CI beside
// another run, `stress-ng --cpu 2`) the node gets a share of a core, and a wall-time deadline failed every probe
// there (15 of 16 during a PING flood, all four after it) while the node served each one in a few ms of its CPU.
import { readFileSync } from 'node:fs';
import { setPriority } from 'node:os';
import type { idClient, ServerNode } from './support.test-helper.js';

export const PROBE_EVERY_MS = 250;
/** The node's CPU time (user and system) a probe call may wait through unanswered: what a quiet core gives in 1 s. */
export const PROBE_CPU_BUDGET_MS = 1_000;
/** A hang guard, not a pace: a call not answered in this long fails however little CPU the node used. */
export const PROBE_HANG_MS = 60_000;
/** How often the probe reads the node's CPU time while a call is out. */
const CPU_SAMPLE_EVERY_MS = 20;
export const MAX_RSS_BYTES = 400 * 1024 * 1024;

export type ProbeClient = ReturnType<typeof idClient>;

/**
 * The probe stands for a caller on a machine of its own: the time it waits to be scheduled here is not the node's
 * to answer for, yet the node's CPU clock runs on meanwhile. So this thread (the one that reads the answers) asks
 * for a higher priority than the node and the machine's other work; where that is not allowed (not root) it runs
 * at the default and a busy machine may fail a probe the node had answered.
 */
export function raiseProbePriority(): void {
  try {
    setPriority(0, -10);
  } catch {
    // Not allowed here: the probe keeps the default priority.
  }
}

/** Resident memory of process `pid` (Linux: /proc/PID/status). */
export function rssBytes(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'))?.[1];
  return Number(kb ?? 0) * 1024;
}

/** CPU time (user and system, all threads) process `pid` has used, in ms (Linux: /proc/PID/stat, 100 ticks a second). */
export function cpuMs(pid: number): number {
  // The command name (field 2) may hold spaces: count the fields after its closing parenthesis.
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name (state is field 3).
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * One probe call: NextIds(1) over the probe's own HTTP/2 connection, failed once node `pid` has spent
 * {@link PROBE_CPU_BUDGET_MS} of CPU time without answering it (or after the {@link PROBE_HANG_MS} hang guard).
 */
export async function probeOnce(client: ProbeClient, pid: number): Promise<boolean> {
  const abort = new AbortController();
  const cpuAtSend = cpuMs(pid);
  const watch = setInterval(() => {
    let spent: number;
    try {
      spent = cpuMs(pid) - cpuAtSend;
    } catch {
      spent = Number.POSITIVE_INFINITY; // the process is gone: the call will not be answered
    }
    if (spent > PROBE_CPU_BUDGET_MS) abort.abort(new Error(`node spent ${spent} ms of CPU without answering`));
  }, CPU_SAMPLE_EVERY_MS);
  try {
    const signal = AbortSignal.any([abort.signal, AbortSignal.timeout(PROBE_HANG_MS)]);
    const res = await client.nextIds({ count: 1 }, { signal });
    return res.blocks.length === 1;
  } catch {
    return false;
  } finally {
    clearInterval(watch);
  }
}

/** What the probe saw during an attack, and in four calls after it. */
export interface ProbeResult {
  readonly calls: number;
  readonly failed: number;
  readonly peakRss: number;
  readonly after: readonly boolean[];
}

/** Probes every 250 ms and samples the node's RSS until `stop` settles, then probes four times more. */
export async function probeWhile(node: ServerNode, client: ProbeClient, stop: Promise<unknown>): Promise<ProbeResult> {
  let done = false;
  void stop.finally(() => (done = true));
  let calls = 0;
  let failed = 0;
  let peakRss = 0;
  while (!done) {
    const started = Date.now();
    calls++;
    if (!(await probeOnce(client, node.process.pid))) failed++;
    peakRss = Math.max(peakRss, rssBytes(node.process.pid));
    const wait = PROBE_EVERY_MS - (Date.now() - started);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  const after: boolean[] = [];
  for (let i = 0; i < 4; i++) after.push(await probeOnce(client, node.process.pid));
  return { calls, failed, peakRss, after };
}

/** The common bounds: the node alive, RSS under 400 MB, ≤ 10% of the probes failed during, none after. */
export function expectWithinBounds(node: ServerNode, probe: ProbeResult): void {
  expect(node.process.exitStatus()).toBeUndefined();
  expect(probe.peakRss).toBeLessThan(MAX_RSS_BYTES);
  expect(probe.failed).toBeLessThanOrEqual(Math.floor(probe.calls / 10));
  expect(probe.after).toEqual([true, true, true, true]);
}
