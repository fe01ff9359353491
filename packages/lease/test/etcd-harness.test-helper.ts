// The etcd side of the lease specs: one real etcd per spec file, a client to read and write its keys directly,
// quick lease settings, and every lease made through it released after each test.
import { QUICK_LEASE_SETTINGS, bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { Etcd3 } from 'etcd3';
import { DEFAULT_PREFIX, DEFAULT_TTL_SECONDS } from '../src/config.js';
import type { EtcdLeaseOptions } from '../src/config.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import type { LeaseTarget, WorkerLease } from '../src/types.js';

/**
 * Lease settings for a holder that must keep its slot through a loaded machine while the test's own step (a reclaim,
 * a forged record, a release) ends its tenure: it fences only after 4 s without an acknowledged keep-alive, where the
 * quick settings (TTL 2 s) fence after 1.5 s, which a machine at load 20-30 reaches (CI: a home holder lapsed and a
 * borrower took the home slot). Every claim holds one TTL before its first mint (the start hold), so 5 s, not more.
 */
export const STEADY_LEASE_SETTINGS = {
  ttlSeconds: 5,
  keepAliveIntervalMs: 1000,
  keepAliveTimeoutMs: 900,
  fenceMarginMs: 1000,
  requestTimeoutMs: 4000,
} as const;

export interface LeaseHarness {
  /** The etcd and a client of it, once the harness's beforeAll has run. */
  current(): { etcd: EtcdServer; kv: Etcd3 };
  /** Quick settings for tests (TTL 2 s; the rules checked are about ordering, not speed) under `prefix`. */
  options(prefix: string, extra?: Partial<EtcdLeaseOptions>): EtcdLeaseOptions;
  /** A lease released after the test. */
  lease(o: EtcdLeaseOptions, target: LeaseTarget): WorkerLease;
  /** Releases every lease made so far (as after each test). */
  releaseAll(): Promise<void>;
}

/** Registers the spec file's beforeAll/afterEach/afterAll; `region` is the default of {@link LeaseHarness.options}. */
export function useLeaseHarness(region: number): LeaseHarness {
  let etcd: EtcdServer | undefined;
  let kv: Etcd3 | undefined;
  const leases: WorkerLease[] = [];
  beforeAll(async () => {
    etcd = await startEtcd();
    kv = new Etcd3({ hosts: [etcd.clientUrl] });
  });
  const releaseAll = async (): Promise<void> => {
    await Promise.all(leases.splice(0).map((l) => l.release()));
  };
  afterEach(releaseAll);
  afterAll(async () => {
    kv?.close();
    await cleanupAll();
  });
  const current = (): { etcd: EtcdServer; kv: Etcd3 } => {
    if (etcd === undefined || kv === undefined) throw new Error('the lease harness is used before its beforeAll ran');
    return { etcd, kv };
  };
  return {
    current,
    options: (prefix, extra = {}) => ({
      endpoints: [current().etcd.clientUrl],
      prefix,
      region,
      ...QUICK_LEASE_SETTINGS,
      ...extra,
    }),
    releaseAll,
    lease(o, target) {
      const l = createEtcdLease(o, target);
      leases.push(l);
      // The region's etcd is bound to its code before its first holder starts, as an operator's idgen region init does.
      const start = l.start.bind(l);
      l.start = async (signal) => {
        // The ceiling at this holder's TTL (a prefix's first holder pins it: ttl-ceiling.ts), so its holds are its own TTL.
        await bindRegion(current().etcd, o.region, o.prefix ?? DEFAULT_PREFIX, {
          ttlCeilingSeconds: o.ttlSeconds ?? DEFAULT_TTL_SECONDS,
        });
        return start(signal);
      };
      return l;
    },
  };
}
