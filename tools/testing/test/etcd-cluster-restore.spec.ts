import { join } from 'node:path';
import { cleanupAll, startEtcdCluster, tempDir } from '../src/index.js';

afterAll(() => cleanupAll());

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');

async function kv(url: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(5000),
  });
  return (await res.json()) as Record<string, unknown>;
}

describe('EtcdCluster.restore', () => {
  it('restores every member from one snapshot: the history after it is gone, a new token gives a new cluster ID', async () => {
    const cluster = await startEtcdCluster(3, { readyTimeoutMs: 60_000 });
    const url = cluster.endpoints[0] as string;
    await kv(url, '/v3/kv/put', { key: b64('before'), value: b64('1') });
    const dir = await tempDir('idgen-cluster-snapshot');
    const file = join(dir.path, 'snap.db');
    const { revision } = await cluster.snapshot(file);
    expect(revision).toBeGreaterThan(1);
    const after = (await kv(url, '/v3/kv/put', { key: b64('after'), value: b64('2') })) as {
      header: { cluster_id: string; revision: string };
    };
    expect(Number(after.header.revision)).toBe(revision + 1);

    await cluster.restore(file, { clusterToken: `restored-${Date.now()}` });
    for (const m of cluster.members) {
      const read = (await kv(m.clientUrl, '/v3/kv/range', { key: b64('before'), range_end: b64('beforf') })) as {
        header: { cluster_id: string; revision: string };
        count?: string;
      };
      expect(read.count).toBe('1');
      expect(Number(read.header.revision)).toBe(revision);
      expect(read.header.cluster_id).not.toBe(after.header.cluster_id);
      const gone = (await kv(m.clientUrl, '/v3/kv/range', { key: b64('after') })) as { count?: string };
      expect(gone.count).toBeUndefined();
    }
    await expect(cluster.leader(10_000)).resolves.toBeDefined();
    // A member stopped and started after the restore rejoins the restored cluster (the new token is kept).
    const m = cluster.members[1];
    await m?.stop();
    await m?.start();
    expect(m?.running()).toBe(true);
    await cluster.stopAll();
    await dir.remove();
  }, 120_000);
});
