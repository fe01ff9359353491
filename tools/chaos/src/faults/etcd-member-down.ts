/**
 * Fault `etcd-member-down` (issue 21, item 9; docs/design.md §5 "one member down costs nothing"): one follower of the
 * 3-member cluster (never the leader) stopped for longer than TTL − fence margin, then started again. The nodes'
 * `--etcd` names one proxy per member, so the member itself is stopped (its proxy stays and refuses onward): a node
 * whose lease talked to that member must carry on through the others before its fence deadline. Expected: no fence
 * by reason `lease` while it is down (and the moment after), and no failed call.
 */
import type { EtcdCluster, EtcdMember } from '@idgen/testing';
import type { FaultHandler } from '../fault-context.js';

/** What the fault did, for the record and the judgement. */
export interface MemberDownRun {
  readonly target: string;
  readonly notes: string[];
  /** Wall ms the member was stopped and started again (undefined: not stopped). */
  readonly stoppedAtMs: number | undefined;
  readonly startedAtMs: number | undefined;
}

/** The followers of `leader`, by name (so `pick` chooses the same one for the same cluster state). */
export function followersOf(members: readonly EtcdMember[], leader: EtcdMember): EtcdMember[] {
  return members.filter((m) => m.name !== leader.name && m.running()).sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * Stops one follower (chosen with `pick` in [0, 1)), waits `effectMs` from `begin`, and starts it again.
 * `announce` is called once the target is known.
 */
export async function stopFollower(
  cluster: EtcdCluster,
  pick: number,
  effectMs: number,
  begin: number,
  sleep: (ms: number) => Promise<void>,
  announce: (target: string) => void,
): Promise<MemberDownRun> {
  const leader = await cluster.leader(10_000).catch(() => undefined);
  if (leader === undefined)
    return { target: '-', notes: ['no leader found'], stoppedAtMs: undefined, startedAtMs: undefined };
  const followers = followersOf(cluster.members, leader);
  const m = followers[Math.floor(pick * followers.length)];
  if (m === undefined)
    return {
      target: '-',
      notes: [`no running follower of ${leader.name}`],
      stoppedAtMs: undefined,
      startedAtMs: undefined,
    };
  const target = `etcd ${m.name} (follower; leader ${leader.name})`;
  announce(target);
  const notes: string[] = [];
  await m.stop();
  const stoppedAtMs = Date.now();
  await sleep(begin + effectMs - Date.now());
  const startedAtMs = Date.now();
  await m.start().catch((e: unknown) => notes.push(`restart failed: ${String(e)}`));
  notes.push(
    `down ${((startedAtMs - stoppedAtMs) / 1000).toFixed(1)} s, healthy again ${((Date.now() - startedAtMs) / 1000).toFixed(1)} s after its start`,
  );
  const after = await cluster.leader(10_000).catch(() => undefined);
  notes.push(`leader after: ${after?.name ?? 'unknown'}`);
  return { target, notes, stoppedAtMs, startedAtMs };
}

/**
 * The expectation of one `etcd-member-down`: lease fences the nodes counted while the member was down (and for
 * `graceMs` after its start: a fence is noticed a little late), and failed calls in the fault's window.
 */
export function judgeMemberDown(leaseFences: number, failedCalls: number): string | undefined {
  const missed: string[] = [];
  if (leaseFences > 0) missed.push(`${leaseFences} lease fence(s)`);
  if (failedCalls > 0) missed.push(`${failedCalls} failed call(s)`);
  return missed.length === 0 ? undefined : `one etcd follower down cost ${missed.join(' and ')} (expected none)`;
}

/**
 * Fault `etcd-member-down`'s handler: one follower stopped for the effect; when, is kept for the judgement at the end
 * (with the failed calls).
 */
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
