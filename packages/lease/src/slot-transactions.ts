import type { Etcd3, Lease } from 'etcd3';
import { deadlineIn, firstKey, rangeKey, withTimeout } from './etcd-client.js';
import type { KeyRead } from './etcd-client.js';
import { parseLastMsRecord } from './records.js';
import type { LastMsRecord } from './records.js';
import type { EtcdHistory } from './etcd-history.js';

/** What one claim transaction found for a slot. */
export type ClaimOutcome =
  /**
   * The worker key was created on our lease at `revision`; `lastMs` is the slot's `last-ms` as read in the same
   * transaction.
   */
  | { readonly kind: 'claimed'; readonly lastMs: KeyRead | undefined; readonly revision: string }
  /**
   * The worker key already exists *on our own lease*: a claim of ours committed and its answer was lost (a
   * transaction re-sent by a retry). The slot is ours; `lastMs` read afresh.
   */
  | { readonly kind: 'adopted'; readonly lastMs: KeyRead | undefined; readonly revision: string }
  /** Another lease holds the slot (`holder` is its worker record, if any). */
  | { readonly kind: 'held'; readonly holder: string | undefined }
  /** The spare-code record the claim compared changed (reclaimed, docs/design.md §7): no slot under that code. */
  | { readonly kind: 'withdrawn' };

/**
 * A borrowed code's `{prefix}/spare-codes/{code}` record at the mod revision read when it said `lent`: every claim
 * and `last-ms` refresh under the code compares it (docs/design.md §7), so a reclaim stops both at once.
 */
export interface SpareGuard {
  readonly key: string;
  readonly modRevision: string;
}

/**
 * Claims a worker slot: creates `workerKey` on `lease` only if it does not exist, reading `last-ms` in the same
 * transaction (docs/design.md §5). A key found bound to our own lease is adopted, never taken as someone else's: that
 * would make the node claim a second slot and leave the first bound to its lease for as long as it lives.
 */
export async function claimSlot(
  client: Etcd3,
  lease: Lease,
  leaseId: string,
  keys: { readonly worker: string; readonly lastMs: string },
  holderRecord: string,
  timeoutMs: number,
  guard?: SpareGuard,
  history?: EtcdHistory,
): Promise<ClaimOutcome> {
  let cmp = client.if(keys.worker, 'Create', '==', 0);
  if (guard !== undefined) cmp = cmp.and(guard.key, 'Mod', '==', guard.modRevision);
  const res = await withTimeout(
    cmp
      .then(lease.put(keys.worker).value(holderRecord), client.get(keys.lastMs))
      .else(client.get(keys.worker), ...(guard === undefined ? [] : [client.get(guard.key)]))
      .options(deadlineIn(timeoutMs))
      .commit(),
    timeoutMs,
    `claim transaction for ${keys.worker}`,
  );
  history?.observe(res.header);
  if (res.succeeded)
    return { kind: 'claimed', lastMs: rangeKey(res.responses[1]), revision: String(res.header.revision) };
  const held = rangeKey(res.responses[0]);
  if (guard !== undefined && rangeKey(res.responses[1])?.modRevision !== guard.modRevision && held?.lease !== leaseId) {
    return { kind: 'withdrawn' };
  }
  if (held === undefined || held.lease !== leaseId) return { kind: 'held', holder: held?.value };
  const range = await withTimeout(
    client.get(keys.lastMs).options(deadlineIn(timeoutMs)).exec(),
    timeoutMs,
    `reading ${keys.lastMs}`,
  );
  history?.observe(range.header);
  return { kind: 'adopted', lastMs: firstKey(range.kvs), revision: held.modRevision };
}

/** What one `last-ms` write did. */
export type LastMsWriteOutcome =
  /** Landed; `revision` is the key's new mod revision (the next write's expectation). */
  | { readonly kind: 'written'; readonly revision: string }
  /** The worker key is gone or bound to another lease: the slot is not ours. Nothing was written. */
  | { readonly kind: 'not-held' }
  /** The slot is ours but `last-ms` is not at the expected revision: `found` is what is there. Nothing was written. */
  | { readonly kind: 'moved'; readonly found: KeyRead | undefined }
  /** The slot is ours but its borrowed code's spare record changed (reclaimed): give the slot back. Nothing was written. */
  | { readonly kind: 'withdrawn' };

/**
 * Writes `record` to `last-ms` only if the worker key is still bound to `leaseId` *and* `last-ms` is still at
 * `expectedRevision` ("0": absent), the record this holder last wrote or read (docs/design.md §5). A write the holder
 * gave up on (a client-side timeout) carries an old expectation, so it cannot land after a newer one, nor
 * after the final released record.
 */
export async function writeLastMsRecord(
  client: Etcd3,
  leaseId: string,
  keys: { readonly worker: string; readonly lastMs: string },
  expectedRevision: string,
  record: LastMsRecord,
  timeoutMs: number,
  guard?: SpareGuard,
  history?: EtcdHistory,
): Promise<LastMsWriteOutcome> {
  let cmp = client.if(keys.worker, 'Lease', '==', leaseId).and(keys.lastMs, 'Mod', '==', expectedRevision);
  if (guard !== undefined) cmp = cmp.and(guard.key, 'Mod', '==', guard.modRevision);
  const res = await withTimeout(
    cmp
      .then(client.put(keys.lastMs).value(JSON.stringify(record)))
      .else(client.get(keys.worker), client.get(keys.lastMs), ...(guard === undefined ? [] : [client.get(guard.key)]))
      .options(deadlineIn(timeoutMs))
      .commit(),
    timeoutMs,
    `last-ms write to ${keys.lastMs}`,
  );
  history?.observe(res.header);
  if (res.succeeded) return { kind: 'written', revision: String(res.header.revision) };
  if (rangeKey(res.responses[0])?.lease !== leaseId) return { kind: 'not-held' };
  const found = rangeKey(res.responses[1]);
  if (
    guard !== undefined &&
    rangeKey(res.responses[2])?.modRevision !== guard.modRevision &&
    (found?.modRevision ?? '0') === expectedRevision
  ) {
    return { kind: 'withdrawn' };
  }
  return { kind: 'moved', found };
}

/**
 * Whether a `last-ms` record found under a slot we hold is one of our own writes that landed late: our node,
 * our lease, and no higher than anything we sent. Anything else is a forgery or an operator's hand.
 */
export function isOwnLateWrite(
  key: string,
  found: KeyRead | undefined,
  own: { readonly nodeId: string; readonly leaseId: string; readonly highestSentMs: number },
): LastMsRecord | undefined {
  if (found === undefined) return undefined;
  let r: LastMsRecord;
  try {
    r = parseLastMsRecord(key, found.value);
  } catch {
    return undefined;
  }
  return r.nodeId === own.nodeId && r.leaseId === own.leaseId && r.ms <= own.highestSentMs ? r : undefined;
}
