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
    expect(j.safetyViolation).toBeUndefined();
    expect(j.notes[0]).toMatch(/^refused: exit 2 after 0\.9 s/);
  });

  it('is a safety violation when the node became ready or claimed a slot (a server before the binding)', () => {
    const j = judgeWrongRegion(
      { exitCode: undefined, bindingLine: undefined, becameReady: true, keys: 3, tookMs: 15_000 },
      1,
      2,
    );
    expect(j.safetyViolation).toBe(
      "a node with region 2 on region 1's etcd could mint: it became ready; 3 key(s) under regions/2/",
    );
    expect(j.expectationMissed).toBe(
      "a node with region 2 on region 1's etcd was not refused as expected: exit none, not 2; no binding line",
    );
  });

  it('misses only the liveness expectation when it ended otherwise but never served', () => {
    const j = judgeWrongRegion(
      { exitCode: 1, bindingLine: undefined, becameReady: false, keys: undefined, tookMs: 900 },
      1,
      2,
    );
    expect(j.safetyViolation).toBeUndefined();
    expect(j.expectationMissed).toBe(
      "a node with region 2 on region 1's etcd was not refused as expected: exit 1, not 2; no binding line; keys under regions/2/ unknown (etcd did not answer)",
    );
  });
});
