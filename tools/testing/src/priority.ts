import { readdirSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * Runs process `pid` (0: this one), all its threads, ahead of the machine's other work: the processes a test shields
 * (a node, its attacker, the probe; a lease holder and its etcd members) then share the cores as on a machine of
 * their own, whatever else runs beside the suite, and the test's own timings (a lease's deadline, a probe) mean what
 * they mean on a quiet machine. Without it a busy machine (`stress-ng --cpu 2`, another CI run) starved a standalone
 * node past its lease's 3.5 s proof window (docs/design.md §6), which fences it for good by design ("the lock ... was
 * last proven held 6763 ms ago"), and every later probe failed on a fence no attack caused. Needs root (CI runs as
 * root); elsewhere it changes nothing and says so once.
 */
export function shieldFromOutsideLoad(pid: number): void {
  try {
    // Every thread: the main one runs the JavaScript, libuv's pool writes and syncs the state file (a late write
    // fences the node at its wall ceiling as surely as a late timer does).
    const self = pid === 0 ? process.pid : pid;
    for (const tid of readdirSync(`/proc/${self}/task`)) setPriority(Number(tid), SHIELD_PRIORITY);
  } catch (e) {
    if (!shieldWarned) console.warn(`tests: cannot raise priority (${String(e)}): a busy machine may fail them`);
    shieldWarned = true;
  }
}

/** The nice value of the node, its attackers and the probe: above the default 0 of the machine's other work. */
const SHIELD_PRIORITY = -5;
let shieldWarned = false;
