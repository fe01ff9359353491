// A child process that runs a standalone lease over a real clock guard, for tests that need a real process to pause
// (SIGSTOP), step (libfaketime) or kill. Configuration: the IDGEN_TEST_STANDALONE environment variable (JSON
// StandaloneLeaseOptions without functions). Prints one JSON object a line on stdout:
// started; state (each lease state event); assign, extend, unassign (what the lease gave the guard); alive | error;
// ids (the IDs minted since the last such line, every 100 ms); released (after SIGTERM).
// It mints one ID a millisecond with the real guard, so two such processes that both mint in a millisecond on the
// same worker mint the same ID (sequence 0) and the parent finds it.
import { createGuardedMinter, isFencedError } from '@idgen/clock-guard';
import { createStandaloneLease } from '../src/standalone-lease.js';
import type { StandaloneLeaseOptions } from '../src/standalone-lease.js';
import type { LeaseTarget } from '../src/types.js';

const print = (o: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ ...o, mono: performance.now(), wall: Date.now() })}\n`);
};

const options = JSON.parse(process.env['IDGEN_TEST_STANDALONE'] ?? '{}') as StandaloneLeaseOptions;
const guard = createGuardedMinter({ region: options.region, checkIntervalMs: 0 });
const target: LeaseTarget = {
  assign(a) {
    guard.assign(a);
    print({ event: 'assign', ...a });
  },
  extend(e) {
    guard.extend(e);
    print({ event: 'extend', ...e });
  },
  unassign(reason, message) {
    guard.unassign(reason, message);
    print({ event: 'unassign', reason, message });
  },
  lastMintedMs: () => guard.lastMintedMs(),
};
const lease = createStandaloneLease(options, target);
lease.on('state', (s) => print({ event: 'state', state: s.state, message: s.message }));
print({ event: 'started', pid: process.pid });

let ids: string[] = [];
const mint = setInterval(() => {
  try {
    ids.push(guard.next().toString());
  } catch (e) {
    if (!isFencedError(e)) throw e;
  }
}, 1);
const report = setInterval(() => {
  if (ids.length === 0) return;
  print({ event: 'ids', ids });
  ids = [];
}, 100);

lease.start().then(
  () => print({ event: 'alive', floorMs: lease.snapshot().floorMs }),
  (e: unknown) => {
    print({ event: 'error', code: (e as { code?: unknown }).code, message: (e as Error).message });
    process.exit(3);
  },
);

process.on('SIGTERM', () => {
  clearInterval(mint);
  void lease.release().then(() => {
    clearInterval(report);
    if (ids.length > 0) print({ event: 'ids', ids });
    print({ event: 'released' });
    process.exit(0);
  });
});
