import fc from 'fast-check';
import { Etcd3, type IKeyValue } from 'etcd3';
import { startEtcd, type EtcdServer } from '@idgen/testing';
import { EtcdModel, globalTime, type ModelTime } from './etcd-model.js';
import { SimNet, installSimNet } from './sim-transport.js';
import { seeded } from './deployment.js';

/**
 * The model is kept honest (issue 32 item 5): the same random operation sequences go to a real etcd and to the
 * model through the same `etcd3` client code, and every answer is compared: revisions, create/mod revisions and
 * versions, compare outcomes, deleted counts, errors, lease TTL answers, and the watch events of a prefix. Lease IDs
 * differ by nature; they are compared by the order they were granted in.
 */

/** A model clock the spec moves by hand (expiry is compared in its own test, on real time). */
function manualTime(): ModelTime & { advance(ms: number): void } {
  let now = 0;
  const timers = new Map<number, { at: number; fn: () => void }>();
  let next = 0;
  return {
    now: () => now,
    setTimer(ms, fn) {
      timers.set(++next, { at: now + ms, fn });
      return next;
    },
    clearTimer(h) {
      timers.delete(h as number);
    },
    advance(ms) {
      now += ms;
      for (const [h, t] of [...timers].sort((a, b) => a[1].at - b[1].at))
        if (t.at <= now) {
          timers.delete(h);
          t.fn();
        }
    },
  };
}

type Op =
  | { op: 'put'; key: number; value: number; withLease: number | undefined }
  | { op: 'delete'; key: number }
  | { op: 'deletePrefix' }
  | { op: 'get'; key: number }
  | { op: 'getAll' }
  | { op: 'getAt'; back: number }
  | {
      op: 'txn';
      key: number;
      target: 'Version' | 'Create' | 'Mod' | 'Value';
      cmp: '==' | '!=' | '<' | '>';
      n: number;
      value: number;
    }
  | { op: 'grant'; ttl: number }
  | { op: 'revoke'; lease: number }
  | { op: 'ttl'; lease: number }
  | { op: 'compact'; back: number };

const key = fc.integer({ min: 0, max: 4 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({
      op: fc.constant('put' as const),
      key,
      value: fc.integer({ min: 0, max: 3 }),
      withLease: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
    }),
    weight: 5,
  },
  { arbitrary: fc.record({ op: fc.constant('delete' as const), key }), weight: 2 },
  { arbitrary: fc.record({ op: fc.constant('deletePrefix' as const) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('get' as const), key }), weight: 2 },
  { arbitrary: fc.record({ op: fc.constant('getAll' as const) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('getAt' as const), back: fc.integer({ min: 0, max: 6 }) }), weight: 1 },
  {
    arbitrary: fc.record({
      op: fc.constant('txn' as const),
      key,
      target: fc.constantFrom('Version' as const, 'Create' as const, 'Mod' as const, 'Value' as const),
      cmp: fc.constantFrom('==' as const, '!=' as const, '<' as const, '>' as const),
      n: fc.integer({ min: 0, max: 12 }),
      value: fc.integer({ min: 0, max: 3 }),
    }),
    weight: 4,
  },
  { arbitrary: fc.record({ op: fc.constant('grant' as const), ttl: fc.integer({ min: 5, max: 60 }) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('revoke' as const), lease: fc.integer({ min: 0, max: 3 }) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('ttl' as const), lease: fc.integer({ min: 0, max: 3 }) }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('compact' as const), back: fc.integer({ min: 0, max: 4 }) }), weight: 1 },
);

/** Runs `ops` through `client` under `prefix`; returns every answer, normalised (lease IDs by grant order). */
async function drive(client: Etcd3, prefix: string, ops: readonly Op[]): Promise<unknown[]> {
  const leases: string[] = [];
  const leaseIndex = (id: string): string => (id === '0' ? '0' : `L${leases.indexOf(id)}`);
  const kv = (k: IKeyValue): unknown => ({
    key: k.key.toString(),
    value: k.value.toString(),
    c: rel(k.create_revision),
    m: rel(k.mod_revision),
    v: k.version,
    lease: leaseIndex(String(k.lease)),
  });
  const out: unknown[] = [];
  const base = Number((await client.get(`${prefix}none`).exec()).header.revision);
  const rel = (r: string | number): number => Number(r) - base;
  let rev = base;
  const events: unknown[] = [];
  const watcher = await client.watch().prefix(prefix).create();
  watcher.on('data', (res) => {
    for (const e of res.events) events.push({ t: e.type, key: e.kv.key.toString(), m: rel(e.kv.mod_revision) });
  });
  const k = (n: number): string => `${prefix}k${n}`;
  for (const o of ops) {
    if (process.env['SIM_DIFF_TRACE'] !== undefined)
      process.stderr.write(
        `${client === undefined ? '' : (client as unknown as { pool: { options: { hosts: string } } }).pool.options.hosts} ${prefix} ${JSON.stringify(o)}\n`,
      );
    try {
      switch (o.op) {
        case 'put': {
          const lease = o.withLease === undefined ? undefined : leases[o.withLease];
          const b = client.put(k(o.key)).value(`v${o.value}`);
          if (lease !== undefined) b.lease(lease);
          const r = await b.exec();
          rev = Number(r.header.revision);
          out.push({ o, rev: rel(rev) });
          break;
        }
        case 'delete': {
          const r = await client.delete().key(k(o.key)).exec();
          rev = Number(r.header.revision);
          out.push({ o, rev: rel(rev), deleted: r.deleted });
          break;
        }
        case 'deletePrefix': {
          const r = await client.delete().prefix(prefix).exec();
          rev = Number(r.header.revision);
          out.push({ o, rev: rel(rev), deleted: r.deleted });
          break;
        }
        case 'get': {
          const r = await client.get(k(o.key)).exec();
          out.push({ o, rev: rel(r.header.revision), kvs: r.kvs.map(kv), count: r.count });
          break;
        }
        case 'getAll': {
          const r = await client.getAll().prefix(prefix).exec();
          out.push({ o, rev: rel(r.header.revision), kvs: r.kvs.map(kv), count: r.count });
          break;
        }
        case 'getAt': {
          const at = base + Math.max(1, rel(rev) - o.back);
          const r = await client.getAll().prefix(prefix).revision(at).exec();
          out.push({ o, at: rel(at), kvs: r.kvs.map(kv) });
          break;
        }
        case 'txn': {
          // Revisions are compared relative to the sequence's start (0 stays "absent").
          const value = o.target === 'Value' ? `v${o.value}` : o.target === 'Version' || o.n === 0 ? o.n : base + o.n;
          const r = await client
            .if(k(o.key), o.target, o.cmp, value)
            .then(client.put(k(o.key)).value(`v${o.value}`))
            .else(client.get(k(o.key)))
            .commit();
          rev = Number(r.header.revision);
          out.push({
            o,
            rev: rel(rev),
            ok: r.succeeded,
            kvs: r.responses.map((x) => x.response_range?.kvs.map(kv) ?? 'put'),
          });
          break;
        }
        case 'grant': {
          const r = await client.leaseClient.leaseGrant({ TTL: o.ttl, ID: 0 });
          leases.push(r.ID);
          out.push({ o, ttl: r.TTL, rev: rel(r.header.revision) });
          break;
        }
        case 'revoke': {
          const id = leases[o.lease];
          if (id === undefined) break;
          const r = await client.leaseClient.leaseRevoke({ ID: id });
          rev = Number(r.header.revision);
          out.push({ o, rev: rel(rev) });
          break;
        }
        case 'ttl': {
          const id = leases[o.lease];
          if (id === undefined) break;
          const r = await client.leaseClient.leaseTimeToLive({ ID: id, keys: true });
          // Remaining seconds tick on different clocks here; the granted TTL and the keys must agree.
          out.push({ o, granted: r.grantedTTL, alive: r.TTL !== '-1', keys: r.keys.map((b) => b.toString()).sort() });
          break;
        }
        case 'compact': {
          const at = base + Math.max(1, rel(rev) - o.back);
          const r = await client.kv.compact({ revision: at, physical: true });
          out.push({ o, at: rel(at), rev: rel(r.header.revision) });
          break;
        }
      }
    } catch (e) {
      out.push({ o, error: (e as Error).constructor.name });
    }
  }
  // A last write every watcher must see, then wait for it: the events before it have all arrived.
  const end = await client.put(`${prefix}end`).value('end').exec();
  const last = rel(end.header.revision);
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('the watch never delivered the last write')), 10_000);
    const check = (): void => {
      if (events.some((e) => (e as { m: number }).m === last)) {
        clearTimeout(t);
        resolve();
      }
    };
    watcher.on('data', check);
    check();
  });
  await watcher.cancel();
  // Revoke what is left, so the next sequence starts with no lease of ours.
  for (const id of leases) await client.leaseClient.leaseRevoke({ ID: id }).catch(() => undefined);
  return [out, events];
}

describe('the etcd model answers as a real etcd does', () => {
  let etcd: EtcdServer;
  let real: Etcd3;
  let net: SimNet;
  let uninstall: () => void;
  let sim: Etcd3;
  let time: ReturnType<typeof manualTime>;

  beforeAll(async () => {
    etcd = await startEtcd();
    real = new Etcd3({ hosts: etcd.clientUrl });
    time = manualTime();
    net = new SimNet(seeded(1));
    uninstall = installSimNet(net);
    sim = new Etcd3({ hosts: 'http://spec--e-m0:2379' });
  }, 60_000);

  afterAll(async () => {
    real?.close();
    sim?.close();
    uninstall?.();
    await etcd?.stop();
  });

  test(
    'random put, delete, txn, lease, compaction and watch sequences get the same answers',
    async () => {
      let round = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 30 }), async (ops) => {
          round++;
          // Each sequence on a fresh model, and on the real etcd under a prefix of its own; revisions compare relative
          // to each side's revision before the sequence.
          const model = new EtcdModel('1', ['1'], time);
          net.addCluster('e', model, 1);
          const prefix = `/diff/${round}/`;
          // A client per sequence (etcd3's watch manager keeps a stream per client; a fresh one per sequence).
          const realClient = new Etcd3({ hosts: etcd.clientUrl });
          const simClient = new Etcd3({ hosts: 'http://spec--e-m0:2379' });
          try {
            const expected = await drive(realClient, prefix, ops);
            const actual = await drive(simClient, prefix, ops);
            expect(actual).toEqual(expected);
          } finally {
            realClient.close();
            simClient.close();
          }
          model.close();
        }),
        {
          numRuns: Number(process.env['SIM_DIFF_RUNS'] ?? 40),
          seed: Number(process.env['SIM_DIFF_SEED'] ?? Date.now() % 2 ** 31),
          endOnFailure: process.env['SIM_DIFF_RUNS'] !== undefined,
        },
      );
    },
    Number(process.env['SIM_DIFF_TIMEOUT'] ?? 300_000),
  );

  test('leases expire in TTL order and their keys go with one delete event each, on real time', async () => {
    // Real time on both sides: etcd's lessor and the model's timers. Each order is a grant order of TTLs 2 s (etcd's
    // minimum: 1 s is raised to it), 3 s and 4 s; keys are deleted in TTL order whatever the grant order.
    const model = new EtcdModel('1', ['1'], globalTime);
    net.addCluster('x', model, 1);
    const simX = new Etcd3({ hosts: 'http://spec--x-m0:2379' });
    const expiry = async (client: Etcd3, prefix: string): Promise<unknown> => {
      const base = Number((await client.get(`${prefix}none`).exec()).header.revision);
      const deleted: { key: string; m: number }[] = [];
      const w = await client.watch().prefix(prefix).create();
      w.on('delete', (kv) => deleted.push({ key: kv.key.toString(), m: Number(kv.mod_revision) - base }));
      const grants: string[] = [];
      for (const ttl of [3, 1, 4]) {
        const g = await client.leaseClient.leaseGrant({ TTL: ttl, ID: 0 });
        grants.push(g.TTL);
        await client.put(`${prefix}ttl${ttl}`).value('x').lease(g.ID).exec();
      }
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('the leases never expired')), 30_000);
        w.on('delete', () => {
          if (deleted.length === 3) {
            clearTimeout(t);
            resolve();
          }
        });
      });
      await w.cancel();
      return { grants, deleted };
    };
    try {
      const [expected, actual] = await Promise.all([expiry(real, '/expiry/'), expiry(simX, '/expiry/')]);
      expect(actual).toEqual(expected);
      expect((expected as { deleted: { key: string }[] }).deleted.map((d) => d.key)).toEqual([
        '/expiry/ttl1',
        '/expiry/ttl3',
        '/expiry/ttl4',
      ]);
    } finally {
      simX.close();
      model.close();
    }
  }, 60_000);
});
