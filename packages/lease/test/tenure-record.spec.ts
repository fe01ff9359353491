// Every slot tenure on record (tenure-ledger.ts), on a real etcd: a claim opens a tenure at floor + 1, in the
// transaction of its first last-ms; a release closes it at the final released millisecond; a crashed holder's tenure
// is closed `expired` by the next holder with the bound of what it may have minted (and the next one starts above
// it); and K + 8 tenures on one slot keep the record at K entries with `compacted` counting the rest.
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { Etcd3 } from 'etcd3';
import { lentEarlierClock } from '@idgen/testing';
import { STEADY_LEASE_SETTINGS, useLeaseHarness } from './etcd-harness.test-helper.js';
import { leaseKeys, parseLastMsRecord } from '../src/records.js';
import { RecordingTarget, uniquePrefix } from '../src/recording-target.test-helper.js';
import { beginReclaim, heldSlotsUnder, lendSpareCode } from '../src/spare-codes.js';
import { TENURE_KEEP, parseTenureRecord } from '../src/tenure-ledger.js';
import type { TenureRecord } from '../src/tenure-ledger.js';
import { DEFAULT_LOAN_TERM_MS, initRegistry } from '../src/registry-identity.js';

jest.setTimeout(180_000);

const harness = useLeaseHarness(2);
const { options, lease } = harness;
let kv: Etcd3;
beforeAll(() => ({ kv } = harness.current()));

const STEADY = STEADY_LEASE_SETTINGS;

/** Polls `check` every 50 ms until it holds; fails naming `what` after 60 s (a deadline, not a pace). */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out after 60 s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function tenures(prefix: string, worker: number, code = 2): Promise<TenureRecord> {
  const key = leaseKeys.tenures(prefix, code, worker);
  const raw = await kv.get(key).string();
  if (raw === null) throw new Error(`${key} is absent`);
  return parseTenureRecord(key, raw);
}

describe('the tenure record', () => {
  it('opens at floor + 1 at the claim and closes released at the final last-ms', async () => {
    const prefix = uniquePrefix('tenure-life');
    const target = new RecordingTarget('a');
    const a = lease(options(prefix, { workers: '4-4', nodeId: 'node-a', kind: 'embedded', ...STEADY }), target);
    await a.start();
    const floor = target.assignment?.floorMs ?? NaN;
    const leaseId = a.snapshot().leaseId;
    const open = await tenures(prefix, 4);
    expect(open.tenures).toEqual([
      expect.objectContaining({
        code: 2,
        worker: 4,
        kind: 'embedded',
        nodeId: 'node-a',
        leaseId,
        firstMs: floor + 1,
        lastMs: null,
        end: 'open',
      }),
    ]);
    target.mint();
    await a.release();
    const final = parseLastMsRecord('k', (await kv.get(leaseKeys.lastMs(prefix, 2, 4)).string()) ?? '');
    expect(final.released).toBe(true);
    const closed = await tenures(prefix, 4);
    expect(closed.tenures).toEqual([
      expect.objectContaining({ leaseId, firstMs: floor + 1, lastMs: final.ms, end: 'released' }),
    ]);
    expect(closed.tenures[0]?.lastMs).toBeGreaterThanOrEqual(target.lastMinted);
  });

  it('writes the first last-ms and the open tenure in one transaction: both created at one revision', async () => {
    const prefix = uniquePrefix('tenure-joint');
    const a = lease(options(prefix, { workers: '9-9', nodeId: 'node-joint' }), new RecordingTarget('joint'));
    await a.start();
    const created = async (key: string): Promise<string | undefined> =>
      (await kv.get(key).exec()).kvs[0]?.create_revision;
    const lastMs = await created(leaseKeys.lastMs(prefix, 2, 9));
    expect(lastMs).toBeDefined();
    expect(await created(leaseKeys.tenures(prefix, 2, 9))).toBe(lastMs);
  });

  it("closes a crashed holder's tenure expired at last-ms + TTL; the next holder starts above it", async () => {
    const prefix = uniquePrefix('tenure-crash');
    const crashed = new RecordingTarget('crashed');
    const a = lease(options(prefix, { workers: '5-5', nodeId: 'node-crashed' }), crashed);
    await a.start();
    const crashedLease = a.snapshot().leaseId ?? '';
    crashed.mint();
    // A crash: the lease goes without a release (etcd revokes it as on expiry); the holder is stopped at once, so it
    // writes nothing more and claims nothing again.
    await kv.leaseClient.leaseRevoke({ ID: crashedLease });
    await a.release();
    const left = parseLastMsRecord('k', (await kv.get(leaseKeys.lastMs(prefix, 2, 5)).string()) ?? '');
    expect(left).toMatchObject({ released: false, leaseId: crashedLease });
    expect((await tenures(prefix, 5)).tenures.at(-1)).toMatchObject({ leaseId: crashedLease, end: 'open' });

    const next = new RecordingTarget('next');
    const b = lease(options(prefix, { workers: '5-5', nodeId: 'node-next' }), next);
    await b.start();
    const bound = left.ms + (left.ttlMs ?? 0);
    const after = await tenures(prefix, 5);
    expect(after.tenures).toEqual([
      expect.objectContaining({ leaseId: crashedLease, nodeId: 'node-crashed', lastMs: bound, end: 'expired' }),
      expect.objectContaining({
        leaseId: b.snapshot().leaseId,
        end: 'open',
        firstMs: (next.assignment?.floorMs ?? 0) + 1,
      }),
    ]);
    expect(bound).toBeGreaterThanOrEqual(crashed.lastMinted);
    expect(after.tenures[1]?.firstMs).toBeGreaterThan(bound);
  });

  it('keeps at most K tenures on a slot that had K + 8, folding the rest into compacted', async () => {
    const prefix = uniquePrefix('tenure-40');
    const leaseIds: string[] = [];
    // Each holder waits out one TTL before its first mint (the start hold), so holders cost time: 40 of them took
    // over the test's 180 s at load 30; K + 8 fold the same way.
    const holders = TENURE_KEEP + 8;
    for (let i = 0; i < holders; i++) {
      const t = new RecordingTarget(`h${i}`);
      const l = lease(options(prefix, { workers: '6-6', nodeId: `node-${i}` }), t);
      await l.start();
      leaseIds.push(l.snapshot().leaseId ?? '');
      t.mint();
      await l.release();
    }
    const r = await tenures(prefix, 6);
    expect(r.tenures).toHaveLength(TENURE_KEEP);
    expect(r.tenures.map((t) => t.leaseId)).toEqual(leaseIds.slice(-TENURE_KEEP));
    // Each holder released, or on a loaded machine lost its quick lease first (expired, fenced): none stays open.
    expect(r.tenures.filter((t) => t.end === 'open')).toEqual([]);
    // At least the 8 older holders' tenures are folded; more when a holder claimed again on a new lease (the claim
    // loop does when the session is lost on a loaded machine; each lease is a tenure of its own). CI saw 26.
    expect(r.compacted.count).toBeGreaterThanOrEqual(holders - TENURE_KEEP);
    expect(r.compacted.maxLastMs).toBeLessThan(r.tenures[0]?.firstMs ?? 0);
    for (let i = 1; i < r.tenures.length; i++)
      expect(r.tenures[i]?.firstMs).toBeGreaterThan(r.tenures[i - 1]?.lastMs ?? Infinity);
  });

  it('a write by someone else under a held key is logged, never fenced for; the holder closes its tenure on top', async () => {
    const prefix = uniquePrefix('tenure-foreign');
    const errors: string[] = [];
    const logger = {
      info: () => undefined,
      warn: () => undefined,
      error: (_f: unknown, msg: string) => errors.push(msg),
    };
    const target = new RecordingTarget('held');
    const a = lease(options(prefix, { workers: '7-7', nodeId: 'node-held', logger, ...STEADY }), target);
    await a.start();
    const key = leaseKeys.tenures(prefix, 2, 7);
    const mine = (await tenures(prefix, 7)).tenures[0];
    // An operator's hand: a valid record with an extra closed tenure before ours.
    const forged = { ...mine, leaseId: '1', nodeId: 'forged', firstMs: 1, lastMs: 2, end: 'released' };
    await kv.put(key).value(JSON.stringify({ tenures: [forged, mine], compacted: { count: 0, maxLastMs: -1 } }));
    // Keep-alives go on (two more extensions): the tenure record fences nobody.
    const extended = target.of('extend').length;
    await target.waitFor(() => target.of('extend').length >= extended + 2, 60_000, 'two keep-alives');
    expect(target.of('unassign')).toHaveLength(0);
    expect(a.snapshot().state).toBe('alive');
    await a.release();
    const after = await tenures(prefix, 7);
    expect(after.tenures.map((t) => [t.nodeId, t.end])).toEqual([
      ['forged', 'released'],
      ['node-held', 'released'],
    ]);
    expect(errors.some((m) => /tenure record changed under a key this holder holds/.test(m))).toBe(true);
  });

  it('a holder fenced with its key still held closes its tenure fenced at its last minted millisecond', async () => {
    const prefix = uniquePrefix('tenure-fenced');
    const target = new RecordingTarget('fenced');
    const a = lease(options(prefix, { workers: '8-8', nodeId: 'node-fenced' }), target);
    await a.start();
    const leaseId = a.snapshot().leaseId;
    target.mint();
    const minted = target.lastMinted;
    // A last-ms this holder did not write, under a key it holds (root of trust): it fences at its next refresh.
    const lastKey = leaseKeys.lastMs(prefix, 2, 8);
    const own = parseLastMsRecord(lastKey, (await kv.get(lastKey).string()) ?? '');
    await kv.put(lastKey).value(JSON.stringify({ ...own, nodeId: 'forger', leaseId: '1' }));
    await target.waitFor((e) => e.kind === 'unassign', 60_000, 'the fence');
    let closed: TenureRecord | undefined;
    await until('the tenure to close', async () => {
      closed = await tenures(prefix, 8);
      return closed.tenures[0]?.end !== 'open';
    });
    expect(closed?.tenures[0]).toMatchObject({ leaseId, end: 'fenced', lastMs: minted });
    await a.release();
  });

  it('a borrowed slot given back at a reclaim closes its tenure reclaimed', async () => {
    const prefix = uniquePrefix('tenure-reclaim');
    // Both holders keep their slots on a loaded machine: with the quick 2 s TTL, one CI run at load 20 let the home
    // holder's lease lapse, and the borrower took the home slot (region 2) instead of code 5.
    const own = lease(options(prefix, { workers: '0-0', nodeId: 'own', ...STEADY }), new RecordingTarget('own'));
    await own.start();
    const io = { client: kv, prefix, timeoutMs: 2000, layout: DEFAULT_LAYOUT };
    await initRegistry({ client: kv, prefix, timeoutMs: 2000 });
    const lentEarlier = lentEarlierClock(DEFAULT_LOAN_TERM_MS); // its first-claim wait over
    await lendSpareCode({ ...io, registry: { client: kv, prefix, timeoutMs: 2000 }, now: lentEarlier }, 5, 2);
    const target = new RecordingTarget('borrower');
    const registry = { endpoints: [harness.current().etcd.clientUrl], prefix };
    const b = lease(
      options(prefix, { workers: '0-0', nodeId: 'borrower', kind: 'embedded', borrowSpare: true, registry, ...STEADY }),
      target,
    );
    await b.start();
    const a = target.assignment;
    expect(a?.region).toBe(5);
    const leaseId = b.snapshot().leaseId;
    await beginReclaim({ ...io, registry: { client: kv, prefix, timeoutMs: 2000 } }, 5);
    // The borrower stops minting (unassigned) at the reclaim, then writes its final records and revokes its lease.
    await target.waitFor((e) => e.kind === 'unassign', 60_000, 'give-back');
    await until('the borrowed slot to be given back', async () => (await heldSlotsUnder(io, 5)).length === 0);
    const r = await tenures(prefix, a?.worker ?? -1, 5);
    const final = parseLastMsRecord('k', (await kv.get(leaseKeys.lastMs(prefix, 5, a?.worker ?? -1)).string()) ?? '');
    expect(r.tenures).toEqual([
      expect.objectContaining({ code: 5, kind: 'embedded', leaseId, end: 'reclaimed', lastMs: final.ms }),
    ]);
  });
});
