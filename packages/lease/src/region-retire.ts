import type { Etcd3 } from 'etcd3';
import type { Layout } from '@idgen/core';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import { RegionBindingError, parseRegionBinding, regionBindingKey } from './region-binding.js';
import type { RegionBindingRecord } from './region-binding.js';

/** How to reach the old cluster of a code, to retire it. */
export interface RetireIo {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly layout: Layout;
}

/** What {@link retireRegion} did in the old cluster. */
export interface RetireReport {
  /** Worker keys deleted (each one's holder fences at once: it watches its key). */
  readonly workerKeysDeleted: number;
  /** Whether the binding was already retired for the same cluster (the step run again). */
  readonly already: boolean;
}

/**
 * Retires region `code` in its old cluster (docs/design.md §5, "One live cluster per code"), before `idgen region
 * restored` binds the code to another cluster: the old binding gets `retired` (compared on its mod revision), so no
 * holder there claims again (every claim checks the binding before it claims and again before its first mint), then
 * every worker key under the prefix is deleted, which fences each holder of the old cluster at once (a holder watches
 * its own key and fences when anyone else deletes it; one that misses the watch fails its next `last-ms` write, which
 * compares the key's lease). Refuses when the etcd reached is not the old cluster (`o.clusterId`) or not bound to
 * `code`: nothing then proves the old cluster gone.
 */
export async function retireRegion(
  io: RetireIo,
  code: number,
  o: { readonly clusterId: string; readonly byClusterId: string; readonly generation: number; readonly at: string },
): Promise<RetireReport> {
  const key = regionBindingKey(io.prefix);
  const res = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key} in the old cluster`,
  );
  const read = firstKey(res.kvs);
  if (read === undefined) throw new RegionBindingError(`the old cluster's etcd has no ${key}: not region ${code}'s`);
  const binding = parseRegionBinding(key, read.value, io.layout.maxRegion);
  if (res.header.cluster_id !== o.clusterId || binding.code !== code || binding.clusterId !== o.clusterId) {
    throw new RegionBindingError(
      `the etcd given to retire is cluster ${res.header.cluster_id}, bound to region ${binding.code} in cluster ` +
        `${binding.clusterId}, not region ${code}'s old cluster ${o.clusterId}: nothing proves that one gone`,
    );
  }
  let already = false;
  if (binding.retired !== undefined) {
    if (binding.retired.byClusterId !== o.byClusterId) {
      throw new RegionBindingError(
        `region ${code} was already retired here for cluster ${binding.retired.byClusterId} (${key}), not ${o.byClusterId}`,
      );
    }
    already = true;
  } else {
    const retired: RegionBindingRecord = {
      ...binding,
      retired: { at: o.at, byClusterId: o.byClusterId, generation: o.generation },
    };
    const put = await withTimeout(
      io.client
        .if(key, 'Mod', '==', read.modRevision)
        .then(io.client.put(key).value(JSON.stringify(retired)))
        .options(deadlineIn(io.timeoutMs))
        .commit(),
      io.timeoutMs,
      `retiring ${key}`,
    );
    if (!put.succeeded) throw new RegionBindingError(`${key} changed meanwhile in the old cluster; run the step again`);
  }
  // Every code's worker keys, not only the region's own: the old cluster is retired as a whole (a borrowed code's
  // holders included), and a key of any holder left there could mint beside the new cluster's.
  let workerKeysDeleted = 0;
  for (let c = 0; c <= io.layout.maxRegion; c++) {
    const del = await withTimeout(
      io.client.delete().prefix(`${io.prefix}/regions/${c}/workers/`).options(deadlineIn(io.timeoutMs)).exec(),
      io.timeoutMs,
      `deleting the worker keys of code ${c} in the old cluster`,
    );
    workerKeysDeleted += Number(del.deleted);
  }
  return { workerKeysDeleted, already };
}
