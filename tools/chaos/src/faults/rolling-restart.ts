/**
 * Fault `rolling-restart` (issue 25, items 1 and 4): every node position of the region in turn, as a deploy does it:
 * SIGTERM (a clean stop, exit 0, like `sigterm-node`), a replacement, and the next position only once the replacement
 * serves (or, beaten to the released slot by the spare, parks as the spare) and the region serves every slot again.
 *
 * With `--previous-server`, the replacements alternate builds per fault: the first `rolling-restart` of a run replaces
 * every node with the previous release, the next one with the tree's again, and so on; so a run is a rolling upgrade
 * and rollback under the chaos load, and the faults in between hit a fleet of the previous release. The supervisor's
 * restarts (a spare finding no free slot) and other faults' replacements run the build their position was given.
 */
import type { FaultContext, FaultHandler } from '../fault-context.js';
import type { Incarnation } from '../node-fleet.js';
import type { ServerBuild } from '../server-build.js';

/** Longest one position may take from its SIGTERM to a serving replacement (boot, claim, floor wait). */
const STEP_LIMIT_MS = 30_000;

/** How a position's replacement ended its step. */
type StepEnd =
  | { readonly t: 'serving'; readonly inc: Incarnation }
  | { readonly t: 'spare'; readonly inc: Incarnation }
  | { readonly t: 'late' };

/** The build this rolling restart installs: the previous release on the 1st, 3rd, … of the run, else the tree's. */
function buildOf(c: FaultContext): ServerBuild {
  const { previous, tree } = c.run.fleet.builds;
  const ordinal = c.run.records.filter((x) => x.fault.kind === 'rolling-restart').length; // this one included
  return previous !== undefined && ordinal % 2 === 1 ? previous : tree;
}

/**
 * Whether a process found every slot held: it waits as the spare (`lease: claim failed; retrying` with a
 * NoFreeWorkerError, docs/design.md §5), or, started by a supervisor that expects it, exited with one.
 */
function isSpare(inc: Incarnation): boolean {
  if (inc.lastError?.includes('NoFreeWorkerError') === true) return true;
  return inc.handle.stdoutLines.some((l) => l.includes('lease: claim failed; retrying') && l.includes('NoFreeWorker'));
}

/**
 * Waits until the position's processes started since `since` include one serving (logged `ready`, still running) or
 * one that found every slot held (the spare), and the region serves `want` nodes.
 */
async function stepEnd(c: FaultContext, position: string, since: number, want: number): Promise<StepEnd> {
  const { fleet, o } = c.run;
  const deadline = Date.now() + STEP_LIMIT_MS;
  while (Date.now() < deadline && !o.signal.aborted) {
    fleet.poll();
    const mine = fleet.incarnations.filter((i) => i.position === position && i.spawnedMs >= since);
    const serving = mine.find((i) => i.readyMs !== undefined && i.exitedMs === undefined);
    const spare = mine.find(isSpare);
    if ((serving ?? spare) !== undefined && (await fleet.serving()).length >= want)
      return serving !== undefined ? { t: 'serving', inc: serving } : { t: 'spare', inc: spare as Incarnation };
    await c.run.sleep(50);
  }
  return { t: 'late' };
}

/**
 * Whether a stopped process logged that it released its slot (`stopped` with `released: true`: the final last-ms
 * written and the lease revoked, so the next holder need not wait out a TTL). Its output may trail its exit a little.
 */
async function releasedOf(c: FaultContext, inc: Incarnation): Promise<boolean | undefined> {
  for (let waited = 0; ; waited += 50) {
    for (const l of inc.handle.stdoutLines) {
      if (!l.includes('"stopped"')) continue;
      try {
        const j = JSON.parse(l) as { msg?: unknown; released?: unknown };
        if (j.msg === 'stopped') return j.released === true;
      } catch {
        // not a JSON line
      }
    }
    if (waited >= 1000) return undefined;
    await c.run.sleep(50);
  }
}

/** Every position in turn: SIGTERM, exit 0 expected; a replacement of this fault's build, serving before the next. */
export const rollingRestart: FaultHandler = async (c) => {
  const { fleet, o } = c.run;
  const r = c.record;
  const build = buildOf(c);
  const want = Math.min(o.slots, o.nodes);
  r.target = `every node → ${build.version}`;
  c.line();
  const missed: string[] = [];
  for (const position of fleet.positions) {
    if (o.signal.aborted) return;
    const t0 = Date.now();
    fleet.setBuild(position, build); // the supervisor restarts a spare of this position with it too
    const old = fleet.current(position);
    let stopped = `${position}: none running`;
    if (old !== undefined) {
      const held = old.worker;
      // Only a node that was serving owes a clean stop: a spare still booting may meet the signal mid-claim.
      const owesCleanStop = old.readyMs !== undefined;
      old.expectedExit = true;
      const exit = await old.handle.stop(15_000);
      const released = await releasedOf(c, old);
      stopped = `${old.name} (${old.version}, worker ${held ?? '-'}) exit ${exit.code}${exit.signal !== null ? ` signal ${exit.signal}` : ''}${released === true ? ' released' : ''}`;
      if (owesCleanStop && exit.code !== 0)
        missed.push(
          `${old.name}: a SIGTERM should end in a clean stop (exit 0), got code ${exit.code} signal ${exit.signal}`,
        );
      else if (owesCleanStop && held !== undefined && released !== true)
        missed.push(`${old.name}: stopped without releasing worker ${held} (its "stopped" line: released ${released})`);
    }
    if (o.signal.aborted) return;
    const since = Date.now();
    if (fleet.current(position) === undefined) await fleet.start(position);
    const end = await stepEnd(c, position, since, want);
    const took = `${((Date.now() - t0) / 1000).toFixed(1)} s`;
    if (end.t === 'late') {
      missed.push(`${position}: no replacement serving within ${STEP_LIMIT_MS / 1000} s`);
      r.notes.push(`${stopped} → no replacement serving after ${took}`);
    } else
      r.notes.push(
        `${stopped} → ${end.inc.name} (${end.inc.version}) ${end.t === 'serving' ? `serving worker ${end.inc.worker ?? '-'}` : 'parked as the spare'} after ${took}`,
      );
  }
  if (missed.length > 0) r.expectationMissed = missed.join('; ');
};
