import type { Etcd3 } from 'etcd3';
import type { LeaseConfig } from './config.js';
import { deadlineIn, errorText, withTimeout } from './etcd-client.js';
import { slotOf } from './lease-session.js';
import type { Session } from './lease-session.js';
import { leaseKeys } from './records.js';

/**
 * The node's registration in discovery (docs/design.md §5, boot step 6): `{prefix}/nodes/{region}/{nodeId}` put on the
 * session's lease once it is alive and asked to register, so it goes with the lease; deleted first at a release.
 */
export class NodeRegistration {
  /** Whether the node asked to be registered (`register()`): each new session registers once alive. */
  wanted = false;

  constructor(
    private readonly cfg: LeaseConfig,
    /** The address discovery hands out; `setAddress` changes it. */
    public address: string,
  ) {}

  /** Puts the node's key on session `s`'s lease (nothing before a slot is claimed). */
  async put(s: Session): Promise<void> {
    const slot = slotOf(s);
    if (slot === undefined) return;
    const key = leaseKeys.node(this.cfg.prefix, slot.region, this.cfg.nodeId);
    const value = {
      nodeId: this.cfg.nodeId,
      region: slot.region,
      worker: slot.worker,
      address: this.address,
      startedAt: new Date(this.cfg.clock.nowMs()).toISOString(),
    };
    await withTimeout(
      s.lease.put(key).value(JSON.stringify(value)).options(deadlineIn(this.cfg.requestTimeoutMs)).exec(),
      this.cfg.requestTimeoutMs,
      `register ${key}`,
    );
  }

  /** Deletes the node's key of `region` if session `s`'s lease still holds it; best effort (it goes with the lease). */
  async deregister(client: Etcd3, s: Session, region: number, timeout: number): Promise<void> {
    const nodeKey = leaseKeys.node(this.cfg.prefix, region, this.cfg.nodeId);
    try {
      await withTimeout(
        client
          .if(nodeKey, 'Lease', '==', s.leaseId)
          .then(client.delete().key(nodeKey))
          .options(deadlineIn(timeout))
          .commit(),
        timeout,
        'deregister',
      );
    } catch (e) {
      this.cfg.logger.warn({ err: errorText(e) }, 'lease: deregistering failed (the key goes with the lease)');
    }
  }
}
