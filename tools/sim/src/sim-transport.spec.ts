import { Etcd3 } from 'etcd3';
import { createEtcdClient } from '@idgen/lease';
import { EtcdModel } from './etcd-model.js';
import { SimNet, installSimNet } from './sim-transport.js';
import { seeded } from './deployment.js';

/**
 * The simulated network's cut link: a request sent into it is held, as a live TCP connection holds it, and lands
 * when the link heals (three times in four; the caller's cancel got there first otherwise), after its caller gave up
 * on it; unless the member's process ended meanwhile. A late `last-ms` write is how the first review's unordered
 * writes happen (tools/sim/mutants/unordered-last-ms.patch).
 */
describe('a request sent into a cut link', () => {
  let net: SimNet;
  let uninstall: () => void;
  let model: EtcdModel;
  let client: ReturnType<typeof createEtcdClient>;
  /** Another process, reading from the other member. */
  let reader: Etcd3;

  beforeEach(() => {
    net = new SimNet(seeded(3));
    uninstall = installSimNet(net);
    model = new EtcdModel('1', ['1', '2']);
    net.addCluster('e', model, 2);
    // One endpoint: member 0, as a holder's route is one member at a time; the lease's client (no retry policy).
    client = createEtcdClient({ endpoints: ['http://p--e-m0:2379'], tls: undefined, auth: undefined });
    reader = new Etcd3({ hosts: 'http://q--e-m1:2379' });
  });

  afterEach(() => {
    client.close();
    reader.close();
    uninstall();
    model.close();
  });

  const putWithDeadline = (key: string): Promise<unknown> =>
    client
      .put(key)
      .value('v')
      .options({ deadline: new Date(Date.now() + 50) })
      .exec();
  const stored = async (): Promise<string[]> => (await reader.getAll().prefix('k').keys()).sort();

  test('lands after its caller gave up, when the link heals', async () => {
    net.setLink('p', 'e', { kind: 'cut' }, 0);
    const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
    for (const k of keys) await expect(putWithDeadline(k)).rejects.toThrow(/DEADLINE_EXCEEDED/);
    // Held: nothing landed while the link was cut.
    expect(await stored()).toEqual([]);
    expect(net.lateDeliveries).toBe(0);
    net.setLink('p', 'e', { kind: 'ok' }, 0);
    // The held requests go on as soon as the link heals (in the same turn: no timer between).
    await new Promise((r) => setImmediate(r));
    const landed = await stored();
    // Most land (a seeded draw drops one in four), each counted.
    expect(landed.length).toBeGreaterThanOrEqual(4);
    expect(landed.length).toBeLessThan(keys.length + 1);
    expect(net.lateDeliveries).toBe(landed.length);
  });

  test('is lost when the member stopped while it was held', async () => {
    net.setLink('p', 'e', { kind: 'cut' }, 0);
    for (const k of ['k1', 'k2', 'k3', 'k4']) await expect(putWithDeadline(k)).rejects.toThrow(/DEADLINE_EXCEEDED/);
    net.setMemberDown('e', 0, true);
    net.setMemberDown('e', 0, false);
    net.setLink('p', 'e', { kind: 'ok' }, 0);
    await new Promise((r) => setImmediate(r));
    expect(await stored()).toEqual([]);
    expect(net.lateDeliveries).toBe(0);
  });
});
