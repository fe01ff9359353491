// A child process that holds a worker slot, for tests that need a real process to SIGKILL or race.
// Configuration: the IDGEN_TEST_LEASE environment variable (JSON EtcdLeaseOptions without functions).
// Prints one JSON object a line on stdout: started, alive | no-free-worker | error, minted (every 50 ms), released.
// It "mints" every 2 ms while its deadline has not passed and its wall clock is not above its ceiling (what the
// clock guard enforces), so the parent can
// compare the last minted millisecond with the next holder's floor.
import { createEtcdLease, isNoFreeWorkerError } from '../src/index.js';
import type { EtcdLeaseOptions, LeaseTarget, WorkerAssignment } from '../src/index.js';

const scriptStartMs = performance.now();
const print = (o: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify(o)}\n`);
};

let assignment: WorkerAssignment | undefined;
let deadline = Number.NEGATIVE_INFINITY;
let ceiling = Number.NEGATIVE_INFINITY;
let lastMinted = -1;
const target: LeaseTarget = {
  assign(a) {
    assignment = a;
    deadline = a.deadlineMonoMs;
    ceiling = a.ceilingMs;
  },
  extend(e) {
    if (e.deadlineMonoMs > deadline) deadline = e.deadlineMonoMs;
    if (e.ceilingMs > ceiling) ceiling = e.ceilingMs;
  },
  unassign(reason, message) {
    assignment = undefined;
    deadline = Number.NEGATIVE_INFINITY;
    ceiling = Number.NEGATIVE_INFINITY;
    print({ event: 'unassigned', reason, message });
  },
  lastMintedMs: () => lastMinted,
};

const options = JSON.parse(process.env['IDGEN_TEST_LEASE'] ?? '{}') as EtcdLeaseOptions;
const lease = createEtcdLease(options, target);
print({ event: 'started', scriptStartMs });

lease.start().then(
  () => {
    print({
      event: 'alive',
      region: assignment?.region,
      worker: assignment?.worker,
      floorMs: assignment?.floorMs,
      // performance.now() counts from process start: this is start-to-mint-ready
      uptimeMs: performance.now(),
      scriptStartMs,
    });
    setInterval(() => {
      const now = Date.now();
      if (assignment !== undefined && performance.now() < deadline && now <= ceiling)
        lastMinted = Math.max(lastMinted, now);
    }, 2);
    setInterval(() => print({ event: 'minted', lastMinted }), 50);
  },
  (e: unknown) => {
    const line = {
      event: isNoFreeWorkerError(e) ? 'no-free-worker' : 'error',
      message: e instanceof Error ? e.message : String(e),
    };
    // Exit once the line is out: stdout to a pipe is asynchronous, and process.exit() right after a write can
    // drop it (the parent then saw only "started": seen on a loaded machine).
    process.stdout.write(`${JSON.stringify(line)}\n`, () => process.exit(3));
  },
);

process.on('SIGTERM', () => {
  void lease.release().then(() => {
    process.stdout.write(`${JSON.stringify({ event: 'released', lastMinted })}\n`, () => process.exit(0));
  });
});
