// What the tenure witness (src/tenure-witness.ts) costs a claim, side by side with a claim without it, in one run on one
// real etcd: each round claims slot 0 with a fresh lease (alternating: without, with the journal), times start() up to
// the state `waiting-for-floor` (the claim's transaction, its first records, and the journal's write when asked for;
// the start hold that follows is the same for both and not timed), then releases. Prints medians, p90 and the ratio.
// Run: node --conditions=@idgen/source --require <register-ts> packages/lease/test/witness-cost.ts [rounds]
// (tools/testing's tsNodeArgs), or `npx jest`-free: see docs/design.md §5 "A witness outside the etcd".
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QUICK_LEASE_SETTINGS, bindRegion, startEtcd } from '@idgen/testing';
import { createEtcdLease, createFileTenureWitness } from '../src/index.js';
import type { LeaseTarget } from '../src/index.js';

const target: LeaseTarget = {
  assign: () => undefined,
  extend: () => undefined,
  unassign: () => undefined,
  lastMintedMs: () => -1,
};

async function claimMs(endpoint: string, journal: string | undefined): Promise<number> {
  const lease = createEtcdLease(
    {
      endpoints: [endpoint],
      region: 1,
      workers: '0-0',
      ...QUICK_LEASE_SETTINGS,
      ...(journal === undefined ? {} : { tenureWitness: createFileTenureWitness(journal) }),
    },
    target,
  );
  const abort = new AbortController();
  const t0 = performance.now();
  let claimedAt = 0;
  const off = lease.on('state', (s) => {
    if (s.state === 'waiting-for-floor' && claimedAt === 0) {
      claimedAt = performance.now();
      abort.abort();
    }
  });
  await lease.start(abort.signal).catch(() => undefined);
  off();
  await lease.release();
  if (claimedAt === 0) throw new Error('the claim never reached waiting-for-floor');
  return claimedAt - t0;
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
};

async function main(): Promise<void> {
  const rounds = Number(process.argv[2] ?? '40');
  const etcd = await startEtcd({ name: 'witness-cost' });
  const dir = await mkdtemp(join(process.env['WITNESS_DIR'] ?? tmpdir(), 'idgen-witness-cost-'));
  try {
    await bindRegion(etcd.clientUrl, 1, undefined, { ttlCeilingSeconds: QUICK_LEASE_SETTINGS.ttlSeconds });
    const without: number[] = [];
    const withJournal: number[] = [];
    await claimMs(etcd.clientUrl, undefined); // warm-up
    for (let i = 0; i < rounds; i++) {
      without.push(await claimMs(etcd.clientUrl, undefined));
      withJournal.push(await claimMs(etcd.clientUrl, join(dir, 'journal')));
    }
    const line = (name: string, xs: number[]): string =>
      `${name.padEnd(22)} median ${pct(xs, 50).toFixed(1)} ms, p90 ${pct(xs, 90).toFixed(1)} ms`;
    console.log(`claims of slot 1/0 on one etcd, ${rounds} rounds each, alternating (journal in ${dir})`);
    console.log(line('without the journal', without));
    console.log(line('with the journal', withJournal));
    console.log(
      `ratio (with / without): median ${(pct(withJournal, 50) / pct(without, 50)).toFixed(2)}, p90 ${(pct(withJournal, 90) / pct(without, 90)).toFixed(2)}`,
    );
  } finally {
    await etcd.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
