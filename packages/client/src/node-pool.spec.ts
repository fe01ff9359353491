import type { AttemptFailure } from './errors.js';
import { NodeGroup, toBaseUrl, type NodeState } from './node-pool.js';

const failure = (node: string): AttemptFailure => ({ node, region: 0, code: 'unavailable', message: 'x', atMonoMs: 0 });

function group(urls: string[], random = () => 0) {
  const closed: string[] = [];
  const g = new NodeGroup(0, { initialMs: 100, maxMs: 400 }, random, (n) => closed.push(n.url));
  g.setUrls(urls);
  return { g, closed };
}

describe('NodeGroup', () => {
  it('picks healthy nodes round-robin and never twice within one refill', () => {
    const { g } = group(['u1', 'u2', 'u3']);
    const tried = new Set<NodeState>();
    const picks: string[] = [];
    for (let n = g.pick(0, tried); n !== undefined; n = g.pick(0, tried)) {
      tried.add(n);
      picks.push(n.url);
    }
    expect(picks).toEqual(['u1', 'u2', 'u3']);
    expect(g.pick(0, new Set())?.url).toBe('u1');
    expect(g.pick(0, new Set())?.url).toBe('u2');
  });

  it('picks an idle node before one still holding a request (a hedged refill outran it), and that one last', () => {
    const { g } = group(['u1', 'u2', 'u3']);
    (g.list()[0] as NodeState).inFlight = 1;
    const tried = new Set<NodeState>();
    const picks: string[] = [];
    for (let n = g.pick(0, tried); n !== undefined; n = g.pick(0, tried)) {
      tried.add(n);
      picks.push(n.url);
    }
    expect(picks).toEqual(['u2', 'u3', 'u1']);
  });

  it('starts at a random node per client', () => {
    const { g } = group(['u1', 'u2', 'u3'], () => 0.5);
    expect(g.pick(0, new Set())?.url).toBe(['u1', 'u2', 'u3'][500_000 % 3]);
  });

  it('backs a failed node off, doubling up to the cap, and resets on success', () => {
    const { g } = group(['u1', 'u2'], () => 0.5); // no jitter at 0.5
    const u1 = g.list()[0] as NodeState;
    g.markFailed(u1, 1000, failure('u1'));
    expect(u1.unhealthyUntilMs).toBe(1100);
    g.markFailed(u1, 1000, failure('u1'));
    expect(u1.unhealthyUntilMs).toBe(1200);
    g.markFailed(u1, 1000, failure('u1'));
    g.markFailed(u1, 1000, failure('u1'));
    expect(u1.unhealthyUntilMs).toBe(1400);
    expect(g.pick(1399, new Set([g.list()[1] as NodeState]))).toBeUndefined();
    expect(g.pick(1400, new Set())?.url).toBe('u1');
    expect(g.earliestRetryMs()).toBe(0);
    g.markOk(u1);
    expect(u1.failures).toBe(0);
  });

  it('keeps the health of nodes that stay and closes those that leave, after their attempt', () => {
    const { g, closed } = group(['u1', 'u2']);
    const [u1, u2] = g.list() as [NodeState, NodeState];
    g.markFailed(u1, 0, failure('u1'));
    u2.inFlight = 1;
    expect(g.setUrls(['u1', 'u3'])).toBe(true);
    expect(g.list()[0]).toBe(u1);
    expect(u1.failures).toBe(1);
    expect(u2.removed).toBe(true);
    expect(closed).toEqual([]); // u2 still has an attempt running
    expect(g.setUrls(['u3', 'u1'])).toBe(false);
    g.setUrls([]);
    expect(closed).toEqual(['u1', 'u3']);
  });
});

describe('toBaseUrl', () => {
  it.each([
    ['127.0.0.1:8080', false, 'http://127.0.0.1:8080'],
    ['idgen-2.example:443', true, 'https://idgen-2.example:443'],
    ['http://10.0.0.1:8080/', false, 'http://10.0.0.1:8080'],
    ['https://x:1', false, 'https://x:1'],
  ])('%s (tls %s) → %s', (address, tls, url) => {
    expect(toBaseUrl(address, tls)).toBe(url);
  });
});
