import { DEFAULT_LAYOUT } from '@idgen/core';
import type { Etcd3 } from 'etcd3';
import { useLeaseHarness } from './etcd-harness.test-helper.js';
import { createEtcdLease } from '../src/etcd-lease.js';
import { CorruptRecordError, isLeaseError } from '../src/errors.js';
import { RecordingTarget, uniquePrefix } from '../src/recording-target.test-helper.js';
import { RegionBindingError, checkRegionBinding, parseRegionBinding, regionBindingKey } from '../src/region-binding.js';
import { initRegion } from '../src/region-init.js';

jest.setTimeout(60_000);

// docs/design.md §5, region binding: {prefix}/region names the one region code a region's etcd serves, and the etcd
// cluster it was written in. One real etcd; each test its own prefix.

const harness = useLeaseHarness(2);
const { options, lease } = harness;
let kv: Etcd3;
beforeAll(() => ({ kv } = harness.current()));

const io = (prefix: string) => ({ client: kv, prefix, timeoutMs: 2000, layout: DEFAULT_LAYOUT });

async function refusal(p: Promise<unknown>): Promise<Error> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!(e instanceof Error)) throw new Error(`expected a refusal, got ${String(e)}`);
  return e;
}

async function clusterId(): Promise<string> {
  return (await kv.get('/idgen-test/probe').exec()).header.cluster_id;
}

describe('initRegion (idgen region init)', () => {
  it('binds the prefix to the code with etcd’s cluster ID, and is idempotent', async () => {
    const prefix = uniquePrefix('init');
    const first = await initRegion({ ...io(prefix), now: () => Date.parse('2026-01-02T03:04:05Z') }, 2);
    expect(first).toEqual({
      changed: true,
      record: { code: 2, clusterId: await clusterId(), at: '2026-01-02T03:04:05.000Z' },
      // Not told a ceiling: the default, as `idgen region init` pins it (no holder starts on an etcd without one).
      ceiling: { ttlCeilingSeconds: 6, at: '2026-01-02T03:04:05.000Z' },
    });
    const stored = (await kv.get(regionBindingKey(prefix)).string()) ?? '';
    expect(parseRegionBinding(regionBindingKey(prefix), stored)).toEqual(first.record);
    // Again: nothing written, the first record returned.
    const again = await initRegion(io(prefix), 2);
    expect(again).toEqual({ changed: false, record: first.record, ceiling: first.ceiling });
    expect(await kv.get(regionBindingKey(prefix)).string()).toBe(stored);
  });

  it('refuses another code on a bound prefix, in one line naming the bound code', async () => {
    const prefix = uniquePrefix('init-other');
    await initRegion(io(prefix), 2);
    const e = await refusal(initRegion(io(prefix), 3));
    expect(e).toBeInstanceOf(RegionBindingError);
    expect(isLeaseError(e) && e.code === 'region-binding' && !e.retryable).toBe(true);
    expect(e.message).toMatch(/already bound to region 2 \(.*\/region, since .*\): one etcd serves one region code/);
    expect(e.message).not.toContain('\n');
    expect(parseRegionBinding('k', (await kv.get(regionBindingKey(prefix)).string()) ?? '').code).toBe(2);
  });
});

describe('checkRegionBinding (what every holder and spare-code step reads first)', () => {
  it('refuses an unbound prefix, telling to run idgen region init', async () => {
    const prefix = uniquePrefix('unbound');
    const e = await refusal(checkRegionBinding(io(prefix), 2));
    expect(e).toBeInstanceOf(RegionBindingError);
    expect(e.message).toMatch(/never bound to a region code/);
    expect(e.message).toContain(`idgen region init --region 2 --etcd … --etcd-prefix ${prefix}`);
    expect(e.message).not.toContain('\n');
  });

  it('passes for the bound code; refuses another code and a binding written in another cluster', async () => {
    const prefix = uniquePrefix('check');
    await initRegion(io(prefix), 2);
    const ok = await checkRegionBinding(io(prefix), 2);
    expect(ok.record.code).toBe(2);
    expect(ok.clusterId).toBe(ok.record.clusterId);

    const other = await refusal(checkRegionBinding(io(prefix), 3));
    expect(other).toBeInstanceOf(RegionBindingError);
    expect(other.message).toMatch(/this etcd serves region 2 \(.*\/region\), not region 3/);

    // A binding copied from another cluster (a restored snapshot, or written by hand): another clusterId.
    const forged = uniquePrefix('forged');
    const real = await clusterId();
    const elsewhere = real === '1' ? '2' : '1';
    await kv.put(regionBindingKey(forged)).value(JSON.stringify({ code: 2, clusterId: elsewhere, at: 't' }));
    const restored = await refusal(checkRegionBinding(io(forged), 2));
    expect(restored).toBeInstanceOf(RegionBindingError);
    expect(restored.message).toContain(
      `this etcd reports cluster ${real}, but region 2 was bound in cluster ${elsewhere}`,
    );
    // init refuses it too, rather than trusting or overwriting it.
    expect((await refusal(initRegion(io(forged), 2))).message).toMatch(/a restored or replaced etcd is never trusted/);
  });

  it('garbage in {prefix}/region is refused naming the key', async () => {
    const prefix = uniquePrefix('garbage');
    const key = regionBindingKey(prefix);
    for (const [raw, why] of [
      ['nope', /not JSON/],
      ['[2]', /not a JSON object/],
      ['{"code":9,"clusterId":"1","at":"t"}', /field code is not a region code 0-7/],
      ['{"code":2,"clusterId":"x1","at":"t"}', /field clusterId is not a decimal cluster ID/],
      ['{"code":2,"clusterId":"1"}', /field at is not a string/],
    ] as const) {
      await kv.put(key).value(raw);
      const e = await refusal(checkRegionBinding(io(prefix), 2));
      expect(e).toBeInstanceOf(CorruptRecordError);
      expect((e as CorruptRecordError).key).toBe(key);
      expect(e.message).toContain(key);
      expect(e.message).toMatch(why);
    }
    // A lease on it does not start either.
    const t = new RecordingTarget('on-garbage');
    const l = createEtcdLease(options(prefix, { workers: '0-3' }), t);
    const e = await refusal(l.start());
    await l.release();
    expect(e).toBeInstanceOf(CorruptRecordError);
    expect(t.of('assign')).toHaveLength(0);
  });
});

describe('a lease start checks the binding', () => {
  it('region 3 on a prefix bound to 2 is refused (region-binding) and claims no slot; region 2 starts', async () => {
    const prefix = uniquePrefix('lease');
    await initRegion(io(prefix), 2);
    const t = new RecordingTarget('region-3');
    // createEtcdLease itself: the harness's lease() binds the prefix to the lease's region before start.
    const wrong = createEtcdLease(options(prefix, { region: 3, workers: '0-3' }), t);
    const e = await refusal(wrong.start());
    await wrong.release();
    expect(isLeaseError(e) && e.code === 'region-binding').toBe(true);
    expect(e.message).toMatch(/this etcd serves region 2 .*, not region 3/);
    expect(t.of('assign')).toHaveLength(0);
    expect(await kv.getAll().prefix(`${prefix}/regions/3/workers/`).keys()).toEqual([]);

    const right = new RecordingTarget('region-2');
    await lease(options(prefix, { region: 2, workers: '0-3' }), right).start();
    expect(right.assignment).toMatchObject({ region: 2 });
    expect(await kv.getAll().prefix(`${prefix}/regions/2/workers/`).keys()).toHaveLength(1);
  });
});
