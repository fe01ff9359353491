import { DEFAULT_LAYOUT } from '@idgen/core';
import { bindRegion, lentEarlierClock } from '@idgen/testing';
import type { Etcd3 } from 'etcd3';
import { STEADY_LEASE_SETTINGS, useLeaseHarness } from './etcd-harness.test-helper.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { CorruptRecordError, NoFreeWorkerError, isLeaseError } from '../src/errors.js';
import { leaseKeys, parseLastMsRecord } from '../src/records.js';
import { RecordingTarget, uniquePrefix } from '../src/recording-target.test-helper.js';
import { claimSlot, writeLastMsRecord } from '../src/slot-transactions.js';
import { casRegistryCode, readRegistryCode } from '../src/spare-registry.js';
import { initRegistry } from '../src/registry-identity.js';
import {
  SpareCodeError,
  adoptSpareCode,
  beginReclaim,
  checkRegionCode,
  exportHandover,
  heldSlotsUnder,
  lendSpareCode,
  parseHandover,
  parseSpareCodeRecord,
  readSpareCode,
  spareCodesOf,
  spareKeys,
} from '../src/spare-codes.js';

jest.setTimeout(120_000);

const harness = useLeaseHarness(2);
const { options, lease } = harness;
let kv: Etcd3;
beforeAll(() => ({ kv } = harness.current()));

/**
 * A region's etcd under `prefix`, with the deployment's spare-code registry (docs/design.md §7) in the same etcd under
 * `registryPrefix` (by default the same prefix: one region's etcd serving as the registry).
 */
/** The deployment's loan term here: four of the borrowers' 6 s TTL, the shortest they may borrow under (§7). */
const LOAN_TERM_MS = 24_000;
const io = (prefix: string, registryPrefix = prefix) => ({
  client: kv,
  prefix,
  timeoutMs: 2000,
  layout: DEFAULT_LAYOUT,
  registry: { client: kv, prefix: registryPrefix, timeoutMs: 2000 },
});
/**
 * `idgen region init --region code` on this prefix, as before the region's first node or spare-code step, and
 * `idgen spare init` of the registry under the same prefix (the etcd serving as the deployment's registry).
 */
const bind = async (prefix: string, code: number): Promise<void> => {
  await bindRegion(harness.current().etcd, code, prefix);
  await initRegistry(io(prefix).registry, { loanTermMs: LOAN_TERM_MS });
};
/**
 * `io(prefix)` for a lend whose first-claim wait (a term and a quarter: docs/design.md §7, "Loan terms") is over: the
 * operator's clock set that far back. The wait itself: "a new loan's borrowers claim …" below.
 */
const lentEarlier = (prefix: string, registryPrefix = prefix) => ({
  ...io(prefix, registryPrefix),
  now: lentEarlierClock(LOAN_TERM_MS),
});
/** The registry a borrower confirms its loans in (docs/design.md §7): this etcd, under `prefix`. */
const reg = (prefix: string) => ({ endpoints: [harness.current().etcd.clientUrl], prefix });
/** A steady embedded borrower of region 2 whose home range (worker 0) is full: it claims under a code lent to 2. */
const borrowerOptions = (prefix: string) =>
  options(prefix, {
    workers: '0-0',
    borrowSpare: true,
    kind: 'embedded',
    registry: reg(prefix),
    ...STEADY_LEASE_SETTINGS,
  });

describe('spare-code records: parsing', () => {
  it('reads the four states and refuses garbage naming the key and the field', () => {
    const key = '/p/spare-codes/5';
    expect(parseSpareCodeRecord(key, '{"code":5,"state":"lent","lentTo":2,"at":"t"}')).toEqual({
      code: 5,
      state: 'lent',
      lentTo: 2,
      at: 't',
    });
    expect(
      parseSpareCodeRecord(
        key,
        '{"code":5,"state":"adopted","at":"t","adoptedFrom":{"lentTo":2,"workers":1,"maxLastMs":9}}',
      ),
    ).toMatchObject({
      state: 'adopted',
      adoptedFrom: { lentTo: 2, workers: 1, maxLastMs: 9 },
    });
    const bad: [string, RegExp][] = [
      ['nope', /not JSON/],
      ['[5]', /not a JSON object/],
      ['{"code":6,"state":"lent","lentTo":2}', /does not match the key/],
      ['{"code":5,"state":"borrowed","lentTo":2}', /field state is not one of lent, reclaiming, reclaimed, adopted/],
      ['{"code":5,"state":"lent"}', /field lentTo is not a region code/],
      ['{"code":5,"state":"lent","lentTo":5}', /other than 5/],
      ['{"code":5,"state":"adopted"}', /adoptedFrom is missing/],
    ];
    for (const [raw, why] of bad) {
      const e = (() => {
        try {
          parseSpareCodeRecord(key, raw);
        } catch (err) {
          return err;
        }
        return undefined;
      })();
      expect(e).toBeInstanceOf(CorruptRecordError);
      expect((e as Error).message).toMatch(why);
      expect((e as Error).message).toContain(key);
    }
  });

  it('spare codes come from the layout record (default 5 and up)', () => {
    expect(spareCodesOf('/p/layout', undefined, 7)).toEqual([5, 6, 7]);
    expect(spareCodesOf('/p/layout', '{"epochMs":0}', 7)).toEqual([5, 6, 7]);
    expect(spareCodesOf('/p/layout', '{"spareCodes":[7,4]}', 7)).toEqual([4, 7]);
    expect(() => spareCodesOf('/p/layout', '{"spareCodes":[8]}', 7)).toThrow(
      /field spareCodes is not a list of distinct region codes 0-7/,
    );
    expect(() => spareCodesOf('/p/layout', '{"spareCodes":[5,5]}', 7)).toThrow(CorruptRecordError);
  });

  it('a handover file with anything wrong is refused with what', () => {
    const good = {
      format: 'idgen-spare-handover/1',
      code: 5,
      lentTo: 2,
      prefix: '/p',
      reclaimedAt: 't',
      layout: DEFAULT_LAYOUT.toRecord(),
      ttlMs: 6000,
      clockBoundMs: 10,
      workers: [{ worker: 3, lastMs: 100, source: { ms: 90, released: false, nodeId: 'n', at: 't' } }],
    };
    expect(parseHandover(JSON.stringify(good)).workers).toEqual([
      { worker: 3, lastMs: 100, source: { ms: 90, released: false, nodeId: 'n', at: 't' } },
    ]);
    expect(() => parseHandover('{', 'f.json')).toThrow(/f.json is not JSON/);
    expect(() => parseHandover(JSON.stringify({ ...good, format: 'x' }))).toThrow(/format/);
    expect(() => parseHandover(JSON.stringify({ ...good, workers: [{ worker: 3 }] }))).toThrow(
      /worker 3 has no lastMs/,
    );
    expect(() => parseHandover(JSON.stringify({ ...good, workers: [good.workers[0], good.workers[0]] }))).toThrow(
      /listed twice/,
    );
  });
});

describe('checkRegionCode (what a node checks at boot)', () => {
  it('a region in use passes; a spare not adopted, a code lent out, or garbage is refused', async () => {
    const prefix = uniquePrefix('check');
    await bind(prefix, 2);
    await expect(checkRegionCode(kv, prefix, 2, { layout: DEFAULT_LAYOUT })).resolves.toBeUndefined();
    await expect(checkRegionCode(kv, prefix, 5, { layout: DEFAULT_LAYOUT })).rejects.toThrow(
      /region code 5 is a spare code \(spare codes 5, 6, 7\) and this etcd has no adoption record .*spare-codes\/5: run "idgen spare adopt 5/,
    );
    await lendSpareCode(io(prefix), 6, 2);
    const lent = await checkRegionCode(kv, prefix, 6, { layout: DEFAULT_LAYOUT }).catch((e: unknown) => e);
    expect(lent).toBeInstanceOf(SpareCodeError);
    expect((lent as Error).message).toMatch(/region code 6 is a spare code this etcd lent to region 2 .* says lent/);
    await kv.put(spareKeys.code(prefix, 7)).value('{"code":7,"state":"taken"}');
    await expect(checkRegionCode(kv, prefix, 7, { layout: DEFAULT_LAYOUT })).rejects.toThrow(CorruptRecordError);
    // The layout record may name other spares.
    const custom = uniquePrefix('check-custom');
    await kv.put(leaseKeys.layout(custom)).value(JSON.stringify({ ...DEFAULT_LAYOUT.toRecord(), spareCodes: [4] }));
    await expect(checkRegionCode(kv, custom, 5, { layout: DEFAULT_LAYOUT })).resolves.toBeUndefined();
    await expect(checkRegionCode(kv, custom, 4, { layout: DEFAULT_LAYOUT })).rejects.toThrow(/spare codes 4\)/);
  });

  it('a lease whose home code is lent out does not start', async () => {
    const prefix = uniquePrefix('check-lease');
    await bind(prefix, 2);
    await lendSpareCode(io(prefix), 5, 2);
    // The loan is in region 2's etcd, bound to 2: a node on code 5 pointed at it is refused by the region binding,
    // before the spare-code check (createEtcdLease itself: the harness's lease() would bind the prefix to 5 first).
    const t = new RecordingTarget('on-5');
    const onLender = createEtcdLease(options(prefix, { region: 5, workers: '0-3' }), t);
    const err = await onLender.start().catch((e: unknown) => e);
    await onLender.release();
    expect(isLeaseError(err) && err.code === 'region-binding').toBe(true);
    expect((err as Error).message).toMatch(/this etcd serves region 2 .*, not region 5/);
    expect(t.of('assign')).toHaveLength(0);
    // An etcd bound to 5 whose record says code 5 is lent out (a restored or hand-written record): the spare-code
    // check refuses the node after the binding check passes.
    const bound5 = uniquePrefix('check-lease-5');
    await bind(bound5, 5);
    await kv.put(spareKeys.code(bound5, 5)).value('{"code":5,"state":"lent","lentTo":2,"at":"t"}');
    const t5 = new RecordingTarget('on-5-bound');
    const err5 = await lease(options(bound5, { region: 5, workers: '0-3' }), t5)
      .start()
      .catch((e: unknown) => e);
    expect(err5).toBeInstanceOf(SpareCodeError);
    expect(t5.of('assign')).toHaveLength(0);
  });
});

describe('lend, reclaim, adopt: the transactions', () => {
  it('lend is idempotent for the same loan and refuses another; reclaim refuses an unlent code', async () => {
    const prefix = uniquePrefix('lend');
    await expect(lendSpareCode(io(prefix), 5, 2)).rejects.toThrow(/never bound to a region code .*idgen region init/);
    await bind(prefix, 2);
    await expect(lendSpareCode(io(prefix), 2, 2)).rejects.toThrow(/region code 2 is not a spare code/);
    // A loan to region 6 belongs in an etcd bound to 6; there, 6 is itself a spare code.
    await expect(lendSpareCode(io(prefix), 5, 6)).rejects.toThrow(/this etcd serves region 2 .*, not region 6/);
    const six = uniquePrefix('lend-6');
    await bind(six, 6);
    await expect(lendSpareCode(io(six), 5, 6)).rejects.toThrow(/region 6 is itself a spare code/);
    expect((await lendSpareCode(io(prefix), 5, 2)).changed).toBe(true);
    expect((await lendSpareCode(io(prefix), 5, 2)).changed).toBe(false);
    // Another loan of the same code from here: region 3's loan belongs in region 3's etcd, so the binding refuses it.
    await expect(lendSpareCode(io(prefix), 5, 3)).rejects.toThrow(/this etcd serves region 2 .*, not region 3/);
    expect(JSON.parse((await kv.get(spareKeys.code(prefix, 5)).string()) ?? '{}')).toMatchObject({
      code: 5,
      lentTo: 2,
      state: 'lent',
    });
    await expect(beginReclaim(io(prefix), 6)).rejects.toThrow(/not lent from this etcd/);
  });

  it('borrowers claim under a code lent to their region once the home range is full, and nowhere else', async () => {
    const prefix = uniquePrefix('borrow');
    await bind(prefix, 2);
    await lease(options(prefix, { workers: '0-0', ...STEADY_LEASE_SETTINGS }), new RecordingTarget('home')).start();
    // Not lent yet: the borrower finds no slot.
    const early = await lease(
      options(prefix, { workers: '0-0', borrowSpare: true, kind: 'embedded', registry: reg(prefix) }),
      new RecordingTarget('early'),
    )
      .start()
      .catch((e: unknown) => e);
    expect(early).toBeInstanceOf(NoFreeWorkerError);
    // Lent to another region: still nothing for region 2. lend refuses to record region 3's loan in region 2's etcd
    // (the binding); a record that says so anyway (restored, or written by hand) gives region 2 nothing.
    await expect(lendSpareCode(io(prefix), 6, 3)).rejects.toThrow(/this etcd serves region 2 .*, not region 3/);
    await kv.put(spareKeys.code(prefix, 6)).value('{"code":6,"state":"lent","lentTo":3,"at":"t"}');
    const other = await lease(
      options(prefix, { workers: '0-0', borrowSpare: true, kind: 'embedded', registry: reg(prefix) }),
      new RecordingTarget('other'),
    )
      .start()
      .catch((e: unknown) => e);
    expect(other).toBeInstanceOf(NoFreeWorkerError);
    await lendSpareCode(lentEarlier(prefix), 5, 2);
    const b = new RecordingTarget('borrower');
    await lease(borrowerOptions(prefix), b).start();
    expect(b.assignment?.region).toBe(5);
    const held = await heldSlotsUnder(io(prefix), 5);
    expect(held).toHaveLength(1);
    expect(JSON.parse(held[0]?.holder ?? '{}')).toMatchObject({ kind: 'embedded' });
    // Without borrowSpare, a full home range stays full.
    const plain = await lease(options(prefix, { workers: '0-0', kind: 'embedded' }), new RecordingTarget('plain'))
      .start()
      .catch((e: unknown) => e);
    expect(plain).toBeInstanceOf(NoFreeWorkerError);
  });

  it("a new loan's borrowers claim under it a term and a quarter after the lend, not before (a registry may have forgotten an older loan)", async () => {
    // An operator's clock a minute ahead: the loan's first claims are due 90 s from now (a term of 24 s, a quarter
    // term and the clock bound past the lend's own time), whatever this machine's speed.
    const prefix = uniquePrefix('first-claim');
    await bind(prefix, 2);
    await lease(options(prefix, { workers: '0-0', ...STEADY_LEASE_SETTINGS }), new RecordingTarget('home')).start();
    const aheadMs = 60_000;
    const lendAt = Date.now() + aheadMs;
    const lent = await lendSpareCode({ ...io(prefix), now: () => Date.now() + aheadMs }, 5, 2);
    const usableFromMs = lent.usableFromMs ?? 0;
    expect(usableFromMs - lendAt).toBeGreaterThanOrEqual(LOAN_TERM_MS + LOAN_TERM_MS / 4 + 10);
    expect(usableFromMs - Date.now()).toBeLessThanOrEqual(aheadMs + LOAN_TERM_MS + LOAN_TERM_MS / 4 + 10);
    // The registry's record carries it, and a term that runs a whole term past it (the wait needs no renewal).
    expect((await readRegistryCode(io(prefix).registry, 5, DEFAULT_LAYOUT.maxRegion))?.record).toMatchObject({
      state: 'lent',
      usableFromMs,
      untilMs: usableFromMs + LOAN_TERM_MS,
    });
    const borrower = (t: RecordingTarget) => lease(borrowerOptions(prefix), t);
    const early = new RecordingTarget('early');
    const refused = await borrower(early)
      .start()
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(NoFreeWorkerError);
    expect((refused as NoFreeWorkerError).refused.join('\n')).toMatch(
      /spare code 5: loan not confirmed by the registry \(a new loan: first claims from .*Z, \d+ ms from now/,
    );
    expect(early.of('assign')).toHaveLength(0);
    // The same lend made a term and a quarter ago (lentEarlierClock): its borrowers claim at once.
    const past = uniquePrefix('first-claim-past');
    await bind(past, 2);
    await lease(options(past, { workers: '0-0', ...STEADY_LEASE_SETTINGS }), new RecordingTarget('home-past')).start();
    expect((await lendSpareCode(lentEarlier(past), 5, 2)).usableFromMs).toBeLessThan(Date.now());
    const b = new RecordingTarget('borrower-past');
    await lease(borrowerOptions(past), b).start();
    expect(b.assignment?.region).toBe(5);
  });

  it('reclaiming stops new claims at once and holders give their slot back (released) at the next refresh', async () => {
    const prefix = uniquePrefix('reclaim');
    await bind(prefix, 2);
    await lease(options(prefix, { workers: '0-0', ...STEADY_LEASE_SETTINGS }), new RecordingTarget('home')).start();
    await lendSpareCode(lentEarlier(prefix), 5, 2);
    const b = new RecordingTarget('borrower');
    await lease(borrowerOptions(prefix), b).start();
    const worker = b.assignment?.worker ?? -1;
    expect(b.assignment?.region).toBe(5);

    expect((await beginReclaim(io(prefix), 5)).state).toBe('reclaiming');
    // No new claim under the code from now on.
    const late = await lease(
      options(prefix, { workers: '0-0', borrowSpare: true, kind: 'embedded', registry: reg(prefix) }),
      new RecordingTarget('late'),
    )
      .start()
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(NoFreeWorkerError);
    // The holder gives its slot back at its next refresh: fenced, then a released last-ms, then no worker key.
    await b.waitFor((e) => e.kind === 'unassign', 60_000, 'the borrowed slot given back');
    expect(b.of('unassign')[0]?.message).toMatch(/spare code 5 is being reclaimed/);
    await waitUntil(async () => (await heldSlotsUnder(io(prefix), 5)).length === 0, 60_000);
    const lastKey = leaseKeys.lastMs(prefix, 5, worker);
    const last = parseLastMsRecord(lastKey, (await kv.get(lastKey).string()) ?? '');
    expect(last.released).toBe(true);
    await expect(exportHandover({ ...io(prefix), ttlMs: 2000, clockBoundMs: 10 }, 5)).resolves.toMatchObject({
      code: 5,
      lentTo: 2,
      workers: [{ worker, lastMs: last.ms }],
    });
    expect((await readSpareCode(io(prefix), 5))?.record.state).toBe('reclaimed');
    // A reclaimed code is not lent again from here.
    await expect(lendSpareCode(io(prefix), 5, 2)).rejects.toThrow(/already recorded here as reclaimed/);
  });

  it('a claim or refresh that read the code as lent cannot commit once the reclaim has (the compare on the spare record)', async () => {
    const prefix = uniquePrefix('interleave');
    await bind(prefix, 2);
    await lendSpareCode(io(prefix), 5, 2);
    const lent = await readSpareCode(io(prefix), 5);
    const guard = { key: lent?.key ?? '', modRevision: lent?.modRevision ?? '' };
    const lease = kv.lease(30, { autoKeepAlive: false });
    const leaseId = await lease.grant();
    try {
      const keys = (w: number) => ({ worker: leaseKeys.worker(prefix, 5, w), lastMs: leaseKeys.lastMs(prefix, 5, w) });
      // Before the reclaim: a claim and a refresh under the code commit.
      expect((await claimSlot(kv, lease, leaseId, keys(1), '{}', 2000, guard)).kind).toBe('claimed');
      const record = { ms: Date.now(), released: false, nodeId: 'b', leaseId, at: 't', ttlMs: 2000 };
      const first = await writeLastMsRecord(kv, leaseId, keys(1), '0', record, 2000, guard);
      expect(first.kind).toBe('written');
      // The reclaim commits between the borrower's read and its next claim and refresh: both are refused.
      await beginReclaim(io(prefix), 5);
      expect(await claimSlot(kv, lease, leaseId, keys(2), '{}', 2000, guard)).toEqual({ kind: 'withdrawn' });
      expect(await kv.get(keys(2).worker).string()).toBeNull();
      const revision = first.kind === 'written' ? first.revision : '';
      expect(
        await writeLastMsRecord(kv, leaseId, keys(1), revision, { ...record, ms: record.ms + 1 }, 2000, guard),
      ).toEqual({ kind: 'withdrawn' });
      // The final released record compares no spare record: it lands.
      expect((await writeLastMsRecord(kv, leaseId, keys(1), revision, { ...record, released: true }, 2000)).kind).toBe(
        'written',
      );
    } finally {
      await lease.revoke();
    }
  });

  it('export waits for held slots; adopt refuses the lender etcd, a held slot, another layout; never lowers a floor', async () => {
    const prefix = uniquePrefix('adopt');
    await bind(prefix, 2);
    await lease(options(prefix, { workers: '0-0', ...STEADY_LEASE_SETTINGS }), new RecordingTarget('home')).start();
    await lendSpareCode(lentEarlier(prefix), 5, 2);
    const b = new RecordingTarget('borrower');
    // The borrower gives its slot back at its next refresh after the reclaim: refreshes 2.5 s apart (not 1 s) leave
    // the export below its window to find the slot still held on a loaded machine (a CI run lost that race once).
    const borrower = lease(
      options(prefix, {
        ...borrowerOptions(prefix),
        ttlSeconds: 6,
        keepAliveIntervalMs: 2500,
        keepAliveTimeoutMs: 1500,
        fenceMarginMs: 1000,
      }),
      b,
    );
    await borrower.start();
    expect(b.assignment?.region).toBe(5);
    await beginReclaim(io(prefix), 5);
    await expect(exportHandover({ ...io(prefix), ttlMs: 2000, clockBoundMs: 10 }, 5)).rejects.toThrow(
      /still held|reclaim/,
    );
    await waitUntil(async () => (await heldSlotsUnder(io(prefix), 5)).length === 0, 60_000);
    const handover = await exportHandover({ ...io(prefix), ttlMs: 2000, clockBoundMs: 10 }, 5);
    // The lender's etcd is bound to region 2: adopting code 5 there is refused by the binding.
    await expect(adoptSpareCode(io(prefix), handover)).rejects.toThrow(/this etcd serves region 2 .*, not region 5/);

    // The new region's etcd is bound to 5 before the adopt (idgen region init --region 5); the registry is the
    // lender's etcd under its prefix, which says reclaimed with this handover.
    const target = uniquePrefix('adopt-new');
    await bind(target, 5);
    await expect(
      adoptSpareCode(io(target, prefix), { ...handover, layout: { ...handover.layout, workerBits: 6 } }),
    ).rejects.toThrow(/layout differs/);
    const w = handover.workers[0]?.worker ?? -1;
    // A higher floor already there stays.
    const higher = { ms: (handover.workers[0]?.lastMs ?? 0) + 60_000, released: true, nodeId: 'x', at: 't' };
    await kv.put(leaseKeys.lastMs(target, 5, w)).value(JSON.stringify(higher));
    const adopted = await adoptSpareCode(io(target, prefix), handover);
    expect(adopted).toMatchObject({
      written: 0,
      changed: true,
      record: { state: 'adopted', adoptedFrom: { lentTo: 2, workers: 1 } },
    });
    expect(JSON.parse((await kv.get(leaseKeys.lastMs(target, 5, w)).string()) ?? '{}')).toEqual(higher);
    await expect(checkRegionCode(kv, target, 5, { layout: DEFAULT_LAYOUT })).resolves.toBeUndefined();

    // Another deployment's new region (its own registry, where the same handover is recorded reclaimed).
    const reclaimedRegistry = async (registryPrefix: string): Promise<string> => {
      const lender = await readRegistryCode(io(prefix).registry, 5);
      await initRegistry(io(registryPrefix).registry, { loanTermMs: LOAN_TERM_MS });
      await casRegistryCode(io(registryPrefix).registry, undefined, {
        ...(lender?.record ?? { code: 5, lentTo: 2, at: 't' }),
        state: 'reclaimed',
      });
      return registryPrefix;
    };
    const fresh = uniquePrefix('adopt-fresh');
    await bind(fresh, 5);
    await reclaimedRegistry(fresh);
    expect((await adoptSpareCode(io(fresh), handover)).written).toBe(1);
    expect(JSON.parse((await kv.get(leaseKeys.lastMs(fresh, 5, w)).string()) ?? '{}')).toMatchObject({
      ms: handover.workers[0]?.lastMs,
      released: true,
      nodeId: 'spare-handover',
    });
    expect((await adoptSpareCode(io(fresh), handover)).changed).toBe(false);

    const busy = uniquePrefix('adopt-busy');
    await bind(busy, 5);
    await kv.put(leaseKeys.worker(busy, 5, 0)).value('{"nodeId":"early"}');
    await reclaimedRegistry(busy);
    await expect(adoptSpareCode(io(busy), handover)).rejects.toThrow(/slots under code 5 are held in this etcd/);
  });
});

async function waitUntil(pred: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = Date.now();
  while (!(await pred())) {
    if (Date.now() - start > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
