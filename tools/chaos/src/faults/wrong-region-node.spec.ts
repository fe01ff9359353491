import { BINDING_LINE, judgeWrongRegion, wrongRegionOf } from './wrong-region-node.js';

const line = 'this etcd serves region 1 (/idgen/region), not region 2: check --region and --etcd (…)';

describe('wrong-region-node', () => {
  it('gives the node a code other than the run’s', () => {
    expect(wrongRegionOf(1)).toBe(2);
    expect(wrongRegionOf(2)).toBe(3);
    expect(BINDING_LINE.test(line)).toBe(true);
  });

  it('is refused: exit 2 with the binding line, never ready, no key under its region', () => {
    const j = judgeWrongRegion({ exitCode: 2, bindingLine: line, becameReady: false, keys: 0, tookMs: 900 }, 1, 2);
    expect(j.expectationMissed).toBeUndefined();
    expect(j.notes[0]).toMatch(/^refused: exit 2 after 0\.9 s/);
  });

  it('misses the expectation when the node served (a server before the binding)', () => {
    const j = judgeWrongRegion(
      { exitCode: undefined, bindingLine: undefined, becameReady: true, keys: 3, tookMs: 15_000 },
      1,
      2,
    );
    expect(j.expectationMissed).toBe(
      "a node with region 2 on region 1's etcd was not refused: exit none, not 2; no binding line; it became ready; 3 key(s) under regions/2/",
    );
  });
});
