/**
 * Faults `etcd-slow-short` and `etcd-slow-long` (issue 12): every node's etcd link delayed for the effect.
 */
import type { FaultHandler } from '../fault-context.js';

/** Every node's etcd link delayed by `latencyMs` each way for the effect (judged by its fences at the end). */
export const etcdSlow: FaultHandler = async (c) => {
  const latency = c.fault.latencyMs ?? 0;
  c.record.target = `every node's etcd link (+${latency} ms each way)`;
  c.line();
  c.run.fleet.setEtcdLatency(latency);
  await c.until();
  c.run.fleet.setEtcdLatency(0);
};
