import { EtcdHistory } from './etcd-history.js';

describe('EtcdHistory', () => {
  it('accepts revisions that stay or rise, in one cluster', () => {
    const h = new EtcdHistory();
    for (const revision of ['5', '5', '9', '12']) expect(h.observe({ cluster_id: '77', revision })).toBeUndefined();
    expect(h.problem).toBeUndefined();
  });

  it('names a revision that went back, and keeps saying so', () => {
    const h = new EtcdHistory();
    h.observe({ cluster_id: '77', revision: '40' });
    expect(h.observe({ cluster_id: '77', revision: '12' })).toMatch(/revision went back from 40 to 12/);
    expect(h.observe({ cluster_id: '77', revision: '41' })).toMatch(/went back/);
    h.reset();
    expect(h.observe({ cluster_id: '77', revision: '12' })).toBeUndefined();
  });

  it('names another cluster ID', () => {
    const h = new EtcdHistory();
    h.observe({ cluster_id: '77', revision: '3' });
    expect(h.observe({ cluster_id: '78', revision: '9' })).toMatch(/cluster 78 after cluster 77/);
  });

  it('ignores answers without a header or with zero fields', () => {
    const h = new EtcdHistory();
    h.observe({ cluster_id: '77', revision: '3' });
    expect(h.observe(undefined)).toBeUndefined();
    expect(h.observe({ cluster_id: '0', revision: '0' })).toBeUndefined();
  });

  it('counts its resets: an answer after one may answer a request sent before it (the epoch tells them apart)', () => {
    const h = new EtcdHistory();
    const before = h.epoch;
    h.observe({ cluster_id: '77', revision: '3' });
    expect(h.epoch).toBe(before);
    h.reset();
    // The restored cluster's answer becomes the new baseline: only the epoch says a verdict came in between.
    expect(h.observe({ cluster_id: '78', revision: '1' })).toBeUndefined();
    expect(h.epoch).toBe(before + 1);
  });
});
