import { ETCD_MISSING_MESSAGE, etcdHealthy, etcdStatus, startEtcd, startEtcdCluster } from '../src/etcd.js';
import { cleanupAll } from '../src/registry.js';
import { existsSync, statSync } from 'node:fs';
import { createServer } from 'node:net';

jest.setTimeout(60_000);

afterAll(async () => {
  await cleanupAll();
});

describe('startEtcd', () => {
  it('starts a healthy etcd on loopback with a private temp data dir, and removes it on stop', async () => {
    const etcd = await startEtcd();
    expect(etcd.clientUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(etcd.endpoint).toBe(etcd.clientUrl.replace('http://', ''));
    expect(await etcdHealthy(etcd.clientUrl)).toBe(true);
    expect(statSync(etcd.dataDir).mode & 0o777).toBe(0o700);
    await etcd.stop();
    expect(existsSync(etcd.dataDir)).toBe(false);
    expect(await etcdHealthy(etcd.clientUrl, 300)).toBe(false);
    await etcd.stop(); // idempotent
  });

  it('pause stops answering, resume answers again', async () => {
    const etcd = await startEtcd();
    etcd.pause();
    expect(await etcdHealthy(etcd.clientUrl, 300)).toBe(false);
    etcd.resume();
    expect(await etcdHealthy(etcd.clientUrl, 2000)).toBe(true);
    await etcd.stop();
  });

  it('restarts on the same port and data dir, keeping the data', async () => {
    const etcd = await startEtcd();
    const put = await fetch(`${etcd.clientUrl}/v3/kv/put`, {
      method: 'POST',
      body: JSON.stringify({ key: Buffer.from('k').toString('base64'), value: Buffer.from('v').toString('base64') }),
    });
    expect(put.ok).toBe(true);
    const oldPid = etcd.pid;
    await etcd.restart({ hard: true, downMs: 100 });
    expect(etcd.pid).not.toBe(oldPid);
    const got = (await (
      await fetch(`${etcd.clientUrl}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key: Buffer.from('k').toString('base64') }),
      })
    ).json()) as { kvs?: { value: string }[] };
    expect(Buffer.from(got.kvs?.[0]?.value ?? '', 'base64').toString()).toBe('v');
    await etcd.stop();
  });

  it('restarts even when its client port is taken for a moment while it is down', async () => {
    const etcd = await startEtcd();
    await etcd.kill();
    const port = Number(etcd.endpoint.split(':')[1]);
    const squatter = createServer((socket) => socket.destroy()); // health probes meanwhile get no answer
    await new Promise<void>((resolve) => squatter.listen(port, '127.0.0.1', resolve));
    const released = new Promise<void>((resolve) => setTimeout(() => squatter.close(() => resolve()), 800));
    await etcd.restart({ hard: true });
    await released;
    expect(await etcdHealthy(etcd.clientUrl)).toBe(true);
    await etcd.stop();
  });

  it('fails with what to install when etcd is not on PATH', async () => {
    const saved = process.env['PATH'];
    process.env['PATH'] = '/nonexistent-dir-for-idgen-test';
    try {
      await expect(startEtcd()).rejects.toThrow(ETCD_MISSING_MESSAGE);
      await expect(startEtcdCluster(3)).rejects.toThrow('apt-get install etcd-server');
    } finally {
      process.env['PATH'] = saved;
    }
  });

  it('reports a clear error with the stderr tail when etcd cannot start', async () => {
    const first = await startEtcd();
    // the same data dir is locked by the first etcd: the second one fails
    await expect(startEtcd({ dataDir: first.dataDir, readyTimeoutMs: 3000 })).rejects.toThrow(
      /etcd n1 (exited|not healthy)/,
    );
    await first.stop();
  });
});

describe('startEtcdCluster', () => {
  it('starts 3 members, finds the leader, survives stopping it and rejoins it', async () => {
    const cluster = await startEtcdCluster(3);
    expect(cluster.endpoints).toHaveLength(3);
    const leader = await cluster.leader();
    const statuses = await Promise.all(cluster.members.map((m) => etcdStatus(m.clientUrl)));
    const leaderIds = new Set(statuses.map((s) => s.leaderId));
    expect(leaderIds.size).toBe(1);
    const leaderStatus = await etcdStatus(leader.clientUrl);
    expect(leaderStatus.memberId).toBe(leaderStatus.leaderId);

    await leader.stop();
    expect(leader.running()).toBe(false);
    const next = await cluster.leader(15_000);
    expect(next.name).not.toBe(leader.name);

    await leader.start();
    expect(await etcdHealthy(leader.clientUrl)).toBe(true);
    await cluster.stopAll();
    for (const m of cluster.members) expect(existsSync(m.dataDir)).toBe(false);
  });
});
