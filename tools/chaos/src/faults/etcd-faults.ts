/**
 * The faults that hit the run's etcd cluster (issue 7, issue 12): its leader stopped, every member killed or
 * paused, every node's link slowed, one follower down, a snapshot restore. Each is a {@link FaultHandler};
 * src/fault-table.ts maps the fault kinds to them.
 */
import { ETCD_PREFIX, type FaultHandler } from '../fault-context.js';
import { stopFollower } from './etcd-member-down.js';
import { judgeSnapshotRestore, runSnapshotRestore } from './snapshot-restore.js';

/** The leader stopped for the effect, then started again; notes the new leader. */
export const etcdLeaderStop: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const leader = await run.cluster.leader(10_000).catch(() => undefined);
  if (leader === undefined) {
    r.notes.push('no leader found');
    return;
  }
  r.target = `etcd ${leader.name}`;
  c.line();
  await leader.stop();
  await c.until();
  await leader.start().catch((e: unknown) => r.notes.push(`restart failed: ${String(e)}`));
  const next = await run.cluster.leader(10_000).catch(() => undefined);
  r.notes.push(`new leader ${next?.name ?? 'unknown'}`);
};

/** Every member killed for the effect, then started again. */
export const etcdClusterStop: FaultHandler = async (c) => {
  const { run, record: r } = c;
  r.target = 'etcd (all members)';
  c.line();
  // SIGKILL (a power cut): SIGTERM'd members wait for each other up to the 5 s grace, which would
  // make the outage longer than scheduled.
  await Promise.all(run.cluster.members.map((m) => m.kill()));
  r.notes.push(`all stopped after ${((Date.now() - c.begin) / 1000).toFixed(1)} s`);
  await c.until();
  const restart = Date.now();
  await Promise.all(run.cluster.members.map((m) => m.start())).catch((e: unknown) =>
    r.notes.push(`restart failed: ${String(e)}`),
  );
  r.notes.push(`healthy again ${((Date.now() - restart) / 1000).toFixed(1)} s after the restart`);
};

/** Every member SIGSTOPped for the effect (short or long: judged by its fences at the end). */
export const etcdPause: FaultHandler = async (c) => {
  c.record.target = 'etcd (all members, SIGSTOP)';
  c.line();
  for (const m of c.run.cluster.members) m.pause();
  await c.until();
  for (const m of c.run.cluster.members) m.resume();
};

/** Every node's etcd link delayed by `latencyMs` each way for the effect (judged by its fences at the end). */
export const etcdSlow: FaultHandler = async (c) => {
  const latency = c.fault.latencyMs ?? 0;
  c.record.target = `every node's etcd link (+${latency} ms each way)`;
  c.line();
  c.run.fleet.setEtcdLatency(latency);
  await c.until();
  c.run.fleet.setEtcdLatency(0);
};

/** One follower stopped for the effect; when, is kept for the judgement at the end (with the failed calls). */
export const etcdMemberDown: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const down = await stopFollower(
    run.cluster,
    c.fault.pick,
    c.fault.effectMs,
    c.begin,
    (ms) => run.sleep(ms),
    (target) => {
      r.target = target;
      c.line();
    },
  );
  r.target = down.target;
  r.notes.push(...down.notes);
  if (down.stoppedAtMs !== undefined)
    run.memberDowns.set(r, { fromMs: down.stoppedAtMs, toMs: down.startedAtMs ?? Date.now() });
};

/** The cluster restored from an older snapshot under a serving node (src/faults/snapshot-restore.ts). */
export const etcdSnapshotRestore: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const target = await c.hitNode(true);
  if (target === undefined) return;
  const { o } = run;
  const common = {
    fleet: run.fleet,
    cluster: run.cluster,
    target,
    region: o.region,
    prefix: ETCD_PREFIX,
    dir: run.dir,
    index: c.fault.index,
  };
  const s = await runSnapshotRestore({
    ...common,
    cliMain: run.operatorCli,
    want: Math.min(o.slots, o.nodes),
    leaseTtlSeconds: o.leaseTtlSeconds,
    sleep: (ms) => run.sleep(ms),
    aborted: () => o.signal.aborted,
  });
  const j = judgeSnapshotRestore(s, run.ttlMs);
  Object.assign(r, { safetyViolation: j.safetyViolation, expectationMissed: j.expectationMissed }).notes.push(
    ...j.notes,
  );
};
