/**
 * A partition the way a network makes it (issue 25, item 5): a node in its own network namespace, cut off in the
 * router (its packets vanish both ways: no error, no ACK), for longer than the lease TTL, while the caller has
 * requests queued towards it; then healed, so TCP delivers the node's late keep-alives and last-ms writes, and the
 * caller's late requests. Real etcd and real server processes, each in its own namespace. Figures are printed, not
 * asserted.
 */
import { join } from 'node:path';
import { decodeId } from '@idgen/core';
import { serverLaunchArgs, tempDir, type ProcessHandle, type TempDir } from '@idgen/testing';
import { createNetnsNetwork, startCaller, type NetnsCaller, type NetnsNetwork } from './netns-fixture.js';

jest.setTimeout(85_000);

const SERVER_MAIN = join(__dirname, '..', '..', '..', '..', 'apps', 'server', 'dist', 'main.js');
const REGION = 3;
const TTL_S = 2;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');

let net: NetnsNetwork | undefined;
let caller: NetnsCaller | undefined;
let dir: TempDir | undefined;

afterAll(async () => {
  caller?.close();
  await net?.destroy();
  await dir?.remove();
});

interface Minted {
  readonly node: string;
  readonly phase: string;
  readonly ids: bigint[];
}

test('a netns partition longer than the TTL: the node fences by its own deadline, late writes change nothing, no duplicates', async () => {
  const network = createNetnsNetwork(['etcd', 'n1', 'n2', 'c']);
  net = network;
  dir = await tempDir('idgen-netns');
  const etcd = network.member('etcd');
  const etcdUrl = `http://${etcd.address}:2379`;
  const e = etcd.spawn('etcd', [
    '--name',
    'e1',
    '--data-dir',
    join(dir.path, 'etcd'),
    '--listen-client-urls',
    etcdUrl,
    '--advertise-client-urls',
    etcdUrl,
    '--listen-peer-urls',
    `http://${etcd.address}:2380`,
    '--initial-advertise-peer-urls',
    `http://${etcd.address}:2380`,
    '--initial-cluster',
    `e1=http://${etcd.address}:2380`,
    '--initial-cluster-state',
    'new',
    '--log-level',
    'warn',
    '--logger',
    'zap',
  ]);
  caller = startCaller(net.member('c'));
  const c = caller;
  // etcd ready, and the region bound (as `idgen region init` does), through the caller's namespace.
  let clusterId: string | undefined;
  for (let i = 0; i < 100 && clusterId === undefined; i++) {
    const a = await c.post(`${etcdUrl}/v3/kv/range`, { key: b64('/idgen/region') }, 1000);
    if (a.status === 200)
      clusterId = (JSON.parse(a.body ?? '{}') as { header?: { cluster_id?: string } }).header?.cluster_id;
    else await sleep(100);
  }
  if (clusterId === undefined) throw new Error(`etcd in its namespace never answered:\n${e.tail(20)}`);
  const value = JSON.stringify({ code: REGION, clusterId, at: new Date().toISOString() });
  await c.post(`${etcdUrl}/v3/kv/put`, { key: b64('/idgen/region'), value: b64(value) }, 5000);
  // And the deployment's TTL ceiling `region init` pins (a node refuses an etcd without one), at the node's TTL.
  const ceiling = JSON.stringify({ ttlCeilingSeconds: TTL_S, at: new Date().toISOString() });
  await c.post(`${etcdUrl}/v3/kv/put`, { key: b64('/idgen/lease-ceiling'), value: b64(ceiling) }, 5000);

  const startNode = (name: string, workers: string): { h: ProcessHandle; url: string } => {
    const m = network.member(name);
    const h = m.spawn(process.execPath, [
      ...serverLaunchArgs(SERVER_MAIN),
      '--region',
      String(REGION),
      '--etcd',
      etcdUrl,
      '--listen',
      `${m.address}:8080`,
      '--metrics-listen',
      'off',
      '--workers',
      workers,
      '--lease-ttl',
      String(TTL_S),
      '--fence-margin-ms',
      '500',
      '--time-source',
      'none',
      '--node-id',
      name,
    ]);
    return { h, url: `http://${m.address}:8080/idgen.v1.IdGenerator/NextIds` };
  };
  const next = async (url: string, timeoutMs: number): Promise<bigint[] | string> => {
    const a = await c.post(url, { count: 5 }, timeoutMs);
    if (a.status !== 200) return a.error ?? `${a.status} ${a.body ?? ''}`;
    const blocks = (JSON.parse(a.body ?? '{}') as { blocks?: { first: string; count: number }[] }).blocks ?? [];
    return blocks.flatMap((b) => Array.from({ length: b.count }, (_, k) => BigInt(b.first) + BigInt(k)));
  };
  const minted: Minted[] = [];
  const collect = async (node: string, url: string, phase: string, n: number): Promise<void> => {
    for (let i = 0; i < n; i++) {
      const r = await next(url, 2000);
      if (typeof r === 'string') throw new Error(`${node} ${phase}: ${r}`);
      minted.push({ node, phase, ids: r });
    }
  };

  const n1 = startNode('n1', '0-1');
  await n1.h.waitForLine(/"msg":"ready"/, 20_000);
  await collect('n1', n1.url, 'before', 20);
  const held = decodeId(minted[0]?.ids[0] as bigint).worker;
  const other = held === 0 ? 1 : 0;

  // The cut: a request with a long deadline sits in the caller's socket buffer (late delivery on heal), and a
  // probe with short deadlines counts the caller's failures.
  const cutAt = Date.now();
  net.cut('n1');
  const late = next(n1.url, 30_000).then((r) => ({ r, at: Date.now() }));
  let probeFailed = 0;
  let probing = true;
  const probe = (async () => {
    while (probing) {
      const r = await next(n1.url, 500);
      if (typeof r === 'string') probeFailed++;
    }
  })();
  await n1.h.waitForLine(/"msg":"(lease|guard): fenced"/, 15_000);
  const fencedAt = Date.now();
  // The slot expires in etcd (TTL after the last keep-alive etcd saw); a spare for slot 0 takes it over.
  await sleep(TTL_S * 1000 + 1000);
  const n2 = startNode('n2', String(held));
  await n2.h.waitForLine(/"msg":"ready"/, 20_000);
  await collect('n2', n2.url, 'during-cut', 20);
  await sleep(Math.max(0, cutAt + 3 * TTL_S * 1000 + 1000 - Date.now()));
  probing = false;
  await probe;
  const healAt = Date.now();
  net.heal('n1');
  let servingAt: number | undefined;
  for (let i = 0; i < 300 && servingAt === undefined; i++) {
    const r = await next(n1.url, 1000);
    if (typeof r !== 'string') {
      servingAt = Date.now();
      minted.push({ node: 'n1', phase: 'after-heal', ids: r });
    } else await sleep(100);
  }
  await collect('n1', n1.url, 'after-heal', 20);
  await collect('n2', n2.url, 'after-heal', 20);
  const lateAnswer = await late;
  if (typeof lateAnswer.r !== 'string') minted.push({ node: 'n1', phase: 'late-request', ids: lateAnswer.r });
  const slots = await c.post(`${etcdUrl}/v3/kv/range`, { key: b64('/idgen/'), range_end: b64('/idgen0') }, 5000);
  const keys = ((JSON.parse(slots.body ?? '{}') as { kvs?: { key: string; value: string }[] }).kvs ?? []).map(
    (kv) => `${Buffer.from(kv.key, 'base64').toString()} = ${Buffer.from(kv.value, 'base64').toString().slice(0, 160)}`,
  );

  console.log(
    [
      `netns partition figures (TTL 2 s, fence margin 500 ms; n1 held worker ${held}, n2 took it over):`,
      `  cut -> n1 fenced (its log): ${fencedAt - cutAt} ms`,
      `  cut lasted: ${healAt - cutAt} ms; heal -> n1 serving again: ${servingAt === undefined ? 'never' : `${servingAt - healAt} ms`}`,
      `  caller probe (500 ms deadline) failed calls during the cut: ${probeFailed}`,
      `  request queued at the cut (30 s deadline): ${typeof lateAnswer.r === 'string' ? `failed after ${lateAnswer.at - cutAt} ms: ${lateAnswer.r}` : `answered ${lateAnswer.at - cutAt} ms after the cut, ${lateAnswer.at - healAt} ms after the heal, worker ${decodeId(lateAnswer.r[0] as bigint).worker}`}`,
      `  n1 lease/guard lines: ${n1.h.lines
        .filter((l) => /"msg":"(lease|guard):/.test(l))
        .map(
          (l) =>
            (JSON.parse(l) as { msg: string; why?: string; reason?: string }).msg +
            ' ' +
            String((JSON.parse(l) as { why?: string }).why ?? ''),
        )
        .join(' | ')}`,
      `  etcd keys after the heal:\n    ${keys.join('\n    ')}`,
    ].join('\n'),
  );

  // The node fenced by its own deadline, and serves again after the heal.
  expect(n1.h.lines.some((l) => /"msg":"(lease|guard): fenced"/.test(l))).toBe(true);
  expect(servingAt).toBeDefined();
  // No duplicates; every ID in the region; n1's worker handed over cleanly: every ID n1 minted on it is below every ID
  // n2 minted on it (a late request or late write that let n1 mint on it after the takeover fails here).
  const all = minted.flatMap((m) => m.ids);
  expect(new Set(all).size).toBe(all.length);
  for (const id of all) expect(decodeId(id).region).toBe(REGION);
  const w0 = (node: string): bigint[] =>
    minted
      .filter((m) => m.node === node)
      .flatMap((m) => m.ids)
      .filter((id) => decodeId(id).worker === held);
  const n1w0 = w0('n1');
  const n2w0 = w0('n2');
  expect(n2w0.length).toBeGreaterThan(0);
  expect(minted.filter((m) => m.node === 'n2').every((m) => m.ids.every((id) => decodeId(id).worker === held))).toBe(
    true,
  );
  const maxN1 = n1w0.reduce((a, b) => (b > a ? b : a), 0n);
  const minN2 = n2w0.reduce((a, b) => (b < a ? b : a), n2w0[0] as bigint);
  expect(maxN1 < minN2).toBe(true);
  // The late `last-ms` writes of n1 (compare on its old revision) did not win the slot back: etcd's record names n2.
  expect(keys.find((k) => k.startsWith(`/idgen/regions/${REGION}/last-ms/${held} `))).toContain('"nodeId":"n2"');
  // Before the cut n1 minted on one worker; after the heal it serves from the other (its old one is n2's).
  for (const m of minted.filter((x) => x.node === 'n1' && x.phase === 'before'))
    for (const id of m.ids) expect(decodeId(id).worker).toBe(held);
  for (const m of minted.filter((x) => x.node === 'n1' && x.phase === 'after-heal'))
    for (const id of m.ids) expect(decodeId(id).worker).toBe(other);
});
