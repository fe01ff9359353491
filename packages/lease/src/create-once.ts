import type { Etcd3 } from 'etcd3';
import { deadlineIn, rangeValue, withTimeout } from './etcd-client.js';

/**
 * What {@link createOnce} found: the key created with the value given, or the value someone wrote first. Either way the
 * cluster ID etcd answered from, so a caller can tell a record written in another cluster (a restore) from its own.
 */
export type CreateOnceResult =
  | { readonly kind: 'created'; readonly clusterId: string }
  | { readonly kind: 'exists'; readonly raw: string; readonly clusterId: string };

/**
 * Writes `key = value` only if the key was never created (etcd's `Create == 0` compare), else reads what is there, in
 * one transaction: the write-once records of a region's etcd (the region binding, the TTL ceiling, docs/design.md §5)
 * are created this way, so two operators running the same step at once never overwrite each other, and the loser
 * reads the winner's record to compare with its own.
 */
export async function createOnce(
  io: { readonly client: Etcd3; readonly timeoutMs: number },
  key: string,
  value: string,
  what: string,
): Promise<CreateOnceResult> {
  const res = await withTimeout(
    io.client
      .if(key, 'Create', '==', 0)
      .then(io.client.put(key).value(value))
      .else(io.client.get(key))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
    io.timeoutMs,
    what,
  );
  const clusterId = res.header.cluster_id;
  if (res.succeeded) return { kind: 'created', clusterId };
  const raw = rangeValue(res.responses[0]);
  if (raw === undefined) throw new Error(`${key} vanished between compare and read; try again`);
  return { kind: 'exists', raw, clusterId };
}
