import {
  createNoopMeter,
  type Attributes,
  type BatchObservableCallback,
  type Meter,
  type Observable,
} from '@opentelemetry/api';
import { FakeNetwork } from './fake-transport.test-helper.js';
import { ManualClock, flush } from './manual-clock.test-helper.js';
import { createIdClient } from './id-client.js';
import { CLIENT_METRIC_NAMES } from './metrics.js';

/** A meter that records what the client registers and reports (packages use only the API: no SDK here). */
function recordingMeter() {
  const noop = createNoopMeter();
  const names = new Map<Observable, string>();
  const callbacks = new Set<BatchObservableCallback>();
  const records: { name: string; value: number; attributes: Attributes | undefined }[] = [];
  const meter: Meter = {
    createGauge: (name, options) => noop.createGauge(name, options),
    createUpDownCounter: (name, options) => noop.createUpDownCounter(name, options),
    createObservableGauge: (name, options) => noop.createObservableGauge(name, options),
    createObservableUpDownCounter: (name, options) => noop.createObservableUpDownCounter(name, options),
    createHistogram: (name) => ({ record: (value, attributes) => void records.push({ name, value, attributes }) }),
    createCounter: (name) => ({ add: (value, attributes) => void records.push({ name, value, attributes }) }),
    createObservableCounter: (name) => {
      // Our own object per instrument: the no-op meter hands out one shared instance.
      const o: Observable = { addCallback: () => undefined, removeCallback: () => undefined };
      names.set(o, name);
      return o;
    },
    addBatchObservableCallback: (cb) => void callbacks.add(cb),
    removeBatchObservableCallback: (cb) => void callbacks.delete(cb),
  };
  const collect = (): Record<string, number> => {
    const values: Record<string, number> = {};
    for (const cb of callbacks) {
      void cb({ observe: (o: Observable, value: number) => void (values[names.get(o) ?? '?'] = value) });
    }
    return values;
  };
  return { meter, records, collect, callbacks };
}

describe('client metrics', () => {
  it('reports hits, misses, discards, retries, failovers and refill latency under the documented names', async () => {
    const clock = new ManualClock();
    const net = new FakeNetwork();
    net.add('h', 1).behaviour = 'unavailable';
    net.add('f', 3);
    const { meter, records, collect, callbacks } = recordingMeter();
    const client = createIdClient({
      region: 1,
      nodes: ['http://h:8080'],
      fallbackRegions: [{ region: 3, nodes: ['http://f:8080'] }],
      clock,
      transport: net.factory,
      meter,
      prefill: false,
    });
    await client.nextId(); // miss; h fails (retry), f serves (failover)
    client.tryNextId(); // hit
    await clock.advance(1000); // the rest expires
    client.tryNextId(); // miss, counts the discards
    expect(collect()).toEqual({
      [CLIENT_METRIC_NAMES.bufferHits]: 1,
      [CLIENT_METRIC_NAMES.bufferMisses]: 2,
      [CLIENT_METRIC_NAMES.bufferDiscarded]: 99,
      [CLIENT_METRIC_NAMES.retries]: 1,
    });
    expect(records).toContainEqual({
      name: CLIENT_METRIC_NAMES.failovers,
      value: 1,
      attributes: { 'idgen.region': 3 },
    });
    expect(records).toContainEqual({
      name: CLIENT_METRIC_NAMES.refillLatency,
      value: 0,
      attributes: { 'idgen.region': 3 },
    });
    await client.close();
    expect(callbacks.size).toBe(0);
  });

  it('counts hedges sent and won, and the loser’s discarded blocks, by region', async () => {
    const clock = new ManualClock();
    const net = new FakeNetwork();
    net.add('a', 1).behaviour = 'manual';
    net.add('b', 1);
    const { meter, records } = recordingMeter();
    const client = createIdClient({
      region: 1,
      nodes: ['http://a:8080', 'http://b:8080'],
      clock,
      transport: net.factory,
      random: () => 0,
      meter,
      prefill: false,
      hedge: { maxMs: 40 },
    });
    const call = client.nextId();
    await clock.advance(40); // a holds the refill: hedged to b, which answers at once
    await call;
    net.get('a').respond(); // a's late answer is discarded
    await flush();
    const attributes = { 'idgen.region': 1 };
    expect(records).toContainEqual({ name: CLIENT_METRIC_NAMES.hedgesSent, value: 1, attributes });
    expect(records).toContainEqual({ name: CLIENT_METRIC_NAMES.hedgesWon, value: 1, attributes });
    expect(records).toContainEqual({ name: CLIENT_METRIC_NAMES.hedgeBlocksDiscarded, value: 1, attributes });
    expect(client.stats()).toMatchObject({ hedgesSent: 1, hedgesWon: 1, hedgeBlocksDiscarded: 1 });
    await client.close();
  });

  it('names every instrument under idgen.client.', () => {
    for (const name of Object.values(CLIENT_METRIC_NAMES)) expect(name).toMatch(/^idgen\.client\.[a-z.]+$/);
  });
});
