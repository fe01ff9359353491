import {
  EtcdAuthenticationFailedError,
  EtcdInvalidAuthTokenError,
  EtcdPermissionDeniedError,
  EtcdRoleNotGrantedError,
  EtcdUserNotFoundError,
} from 'etcd3';
import type { Etcd3 } from 'etcd3';
import type { LeaseConfig } from './config.js';
import { deadlineIn, rangeValue, withTimeout } from './etcd-client.js';
import type { EtcdHistory } from './etcd-history.js';
import { LayoutMismatchError } from './errors.js';
import { leaseKeys, parseLayoutRecord } from './records.js';
import { checkRegionBinding } from './region-binding.js';
import { checkRegionCode } from './spare-codes.js';
import { holdTtlMs } from './ttl-ceiling.js';

/**
 * An etcd error no retry will fix: bad credentials, a role without access to the prefix, a TLS handshake
 * that fails on certificates. The node stops with it instead of retrying forever, not ready, in silence.
 */
export function etcdAccessProblem(e: unknown): string | undefined {
  if (
    e instanceof EtcdAuthenticationFailedError ||
    e instanceof EtcdUserNotFoundError ||
    e instanceof EtcdInvalidAuthTokenError
  ) {
    return `etcd refused the credentials (--etcd-user / --etcd-password-file): ${e.message}`;
  }
  if (e instanceof EtcdPermissionDeniedError || e instanceof EtcdRoleNotGrantedError) {
    return `etcd denied access: the user's role must read and write the deployment's prefix: ${e.message}`;
  }
  const text = e instanceof Error ? e.message : String(e);
  if (/certificate|CERT_|SSL|handshake|wrong version number/i.test(text)) {
    return `TLS to etcd failed (check --etcd-ca, --etcd-cert, --etcd-key and https:// endpoints): ${text}`;
  }
  return undefined;
}

/**
 * What a holder checks of its etcd before it claims (docs/design.md §5, boot step 3): the layout, the region binding,
 * the TTL ceiling and the region code (§7); the binding and the ceiling again at claims. Each check throws its own
 * error; the lifecycle retries all but the non-retryable ones.
 */
export class BootChecks {
  /**
   * The TTL every hold for a holder no record shows waits by (docs/design.md §5, "The TTL ceiling"): the deployment's
   * pinned ceiling, the highest this holder has read (a restore may bring back an etcd that lost the record).
   */
  private holdTtl: number;

  constructor(
    private readonly cfg: LeaseConfig,
    private readonly client: () => Etcd3,
    private readonly history: EtcdHistory,
  ) {
    this.holdTtl = cfg.ttlMs;
  }

  /** The TTL the holds wait by (see {@link checkCeiling}). */
  get holdTtlMs(): number {
    return this.holdTtl;
  }

  /** Compares `{prefix}/layout` with ours, creating it if absent in one transaction (docs/design.md §5 boot step 3). */
  async checkLayout(): Promise<void> {
    const client = this.client();
    const key = leaseKeys.layout(this.cfg.prefix);
    const mine = JSON.stringify(this.cfg.layout.toRecord());
    const res = await withTimeout(
      client
        .if(key, 'Create', '==', 0)
        .then(client.put(key).value(mine))
        .else(client.get(key))
        .options(deadlineIn(this.cfg.requestTimeoutMs))
        .commit(),
      this.cfg.requestTimeoutMs,
      'layout transaction',
    );
    if (res.succeeded) {
      this.cfg.logger.info({ key, layout: mine }, 'lease: wrote the layout record (first process of this deployment)');
      return;
    }
    const raw = rangeValue(res.responses[0]);
    if (raw === undefined) throw new Error(`${key} vanished between compare and read`); // retried
    const record = parseLayoutRecord(key, raw);
    const differences = this.cfg.layout.differences(record, 'in this process', 'in etcd');
    if (differences.length > 0) throw new LayoutMismatchError(key, differences);
  }

  /** docs/design.md §5: this etcd must be bound to this region code (idgen region init), in the cluster it answers from. */
  async checkBinding(): Promise<void> {
    const check = await checkRegionBinding(
      {
        client: this.client(),
        prefix: this.cfg.prefix,
        timeoutMs: this.cfg.requestTimeoutMs,
        layout: this.cfg.layout,
      },
      this.cfg.region,
    );
    this.history.observe({ cluster_id: check.clusterId, revision: check.revision });
  }

  /**
   * docs/design.md §5, "The TTL ceiling": refuses a TTL above the deployment's, and an etcd with no ceiling; holds wait
   * by the ceiling.
   */
  async checkCeiling(): Promise<void> {
    const io = { client: this.client(), prefix: this.cfg.prefix, timeoutMs: this.cfg.requestTimeoutMs };
    this.holdTtl = Math.max(this.holdTtl, await holdTtlMs(io, this.cfg.ttlMs, this.cfg.region));
  }

  /** docs/design.md §7: a code this etcd lent out, or a spare it never adopted, is no home region here. */
  async checkRegionCode(): Promise<void> {
    await checkRegionCode(this.client(), this.cfg.prefix, this.cfg.region, {
      layout: this.cfg.layout,
      timeoutMs: this.cfg.requestTimeoutMs,
    });
  }
}
