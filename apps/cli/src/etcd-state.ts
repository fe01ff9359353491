import {
  EtcdAuthenticationFailedError,
  EtcdInvalidAuthTokenError,
  EtcdPermissionDeniedError,
  EtcdRoleNotGrantedError,
  EtcdUserNotFoundError,
  type Etcd3,
  type IKeyValue,
} from 'etcd3';
import { DEFAULT_LAYOUT, createLayout, type Layout, type LayoutRecord } from '@idgen/core';
import { createEtcdClient } from '@idgen/lease';
import { spareCodesOf } from '@idgen/lease/operator';
import {
  leaseKeys,
  parseLastMsRecord,
  parseLayoutRecord,
  parseRegionBinding,
  parseServingNode,
  regionBindingKey,
  parseSpareCodeRecord,
  parseWorkerRecord,
  spareKeys,
  type LastMsRecord,
  type SpareCodeRecord,
  type ServingNode,
  type WorkerRecord,
} from '@idgen/lease/records';
import { CliError, EXIT_UNREACHABLE, EXIT_USAGE } from './exit-codes.js';
import { ETCD_PEER, dialCheck } from './dial.js';
import type { Deadlines, EtcdConnection } from './options.js';

/** Read-only access to one deployment's keys in etcd (docs/design.md §5). Operators read; only nodes write. */
export interface EtcdReader {
  /** Every key under the prefix, read at one revision, parsed. */
  snapshot(regions?: readonly number[]): Promise<EtcdSnapshot>;
  /** Seconds left on each lease (−1: expired), by lease id. */
  leaseTtls(leaseIds: readonly string[]): Promise<Map<string, number>>;
  /** What is left of the command timeout (at least 1 ms), which started when etcd answered the dial. */
  remainingMs(): number;
  close(): void;
}

/** A worker slot that has a holder or a `last-ms` record (a slot never used has neither). */
export interface SlotState {
  readonly region: number;
  readonly worker: number;
  /** The worker key (bound to the holder's lease): `undefined` when nobody holds the slot. */
  readonly holder: (WorkerRecord & { readonly leaseId: string }) | undefined;
  readonly lastMs: LastMsRecord | undefined;
  /** Why a record of this slot could not be read (a corrupt value), if one could not. */
  readonly corrupt: readonly string[];
}

/** Everything the verbs read, at one etcd revision. */
export interface EtcdSnapshot {
  readonly revision: string;
  /** The layout record, `undefined` when there is none (no node ever started on this prefix). */
  readonly layoutRecord: LayoutRecord | undefined;
  /** Why the layout record could not be read, if it could not. */
  readonly layoutProblem: string | undefined;
  /** The layout the slots were enumerated with: the record's, else docs/design.md §1's default. */
  readonly layout: Layout;
  /** The region codes the layout record holds spare (`spareCodes`; absent: 5-7 in the five-region layout, docs/design.md §7). */
  readonly layoutSpareCodes: readonly number[];
  readonly slots: readonly SlotState[];
  /** Discovery records (`{prefix}/regions/{code}/nodes/{nodeId}`) of the regions asked for. */
  readonly nodes: readonly ServingNode[];
  readonly unreadableNodes: readonly string[];
  /** Spare-code records (`{prefix}/spare-codes/{code}`, docs/design.md §7) by code; unreadable ones in `spareProblems`. */
  readonly spareCodes: ReadonlyMap<number, SpareCodeRecord>;
  readonly spareProblems: readonly string[];
}

/**
 * An etcd refusal of this user, worded as the node words it (@idgen/lease's `etcdAccessProblem`): wrong credentials,
 * or a role without access to the prefix; exit 3, as any etcd the CLI could not use. `undefined` for any other error.
 */
export function etcdAccessError(e: unknown): CliError | undefined {
  if (
    e instanceof EtcdAuthenticationFailedError ||
    e instanceof EtcdUserNotFoundError ||
    e instanceof EtcdInvalidAuthTokenError
  )
    return new CliError(
      EXIT_UNREACHABLE,
      `etcd refused the credentials (--etcd-user / --etcd-password-file): ${e.message}`,
    );
  if (e instanceof EtcdPermissionDeniedError || e instanceof EtcdRoleNotGrantedError)
    return new CliError(
      EXIT_UNREACHABLE,
      `etcd denied access: the user's role must read the deployment's prefix: ${e.message}`,
    );
  return undefined;
}

/**
 * Rejects with an "unreachable" {@link CliError} when `p` takes longer than `ms` or fails; an etcd refusal of the
 * credentials or the role as {@link etcdAccessError} says it.
 */
export function unreachableAfter<T>(p: Promise<T>, ms: number, what: string, timeoutMs = ms): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  p.catch(() => undefined);
  return Promise.race([
    p.catch((e: unknown) => {
      // grpc-js appends a "Resolution note" and a timestamp to connection failures: the first part says what happened.
      const access = etcdAccessError(e);
      if (access !== undefined) throw new CliError(access.exitCode, `${what}: ${access.message}`);
      const message = (e as Error).message.split(/ Resolution note|\n/)[0]?.trim() ?? '';
      throw new CliError(EXIT_UNREACHABLE, `${what}: ${message}`);
    }),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new CliError(EXIT_UNREACHABLE, `${what}: no answer within ${timeoutMs} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Dials the etcd endpoints (within the dial timeout: {@link dialCheck}) and, when one answers, creates the `etcd3`
 * client for them with a deadline of `timeoutMs` on every call (the library's own Authenticate included). Rejects with
 * an exit-3 {@link CliError} naming what went wrong with each endpoint; then no gRPC channel was ever opened.
 */
export async function openEtcdClient(
  connection: EtcdConnection,
  d: Deadlines,
  o: { retryReads?: boolean } = {},
): Promise<Etcd3> {
  const { options } = connection;
  const tls =
    options.tls === undefined
      ? undefined
      : { ca: str(options.tls.ca), cert: str(options.tls.cert), key: str(options.tls.key) };
  const dials = await Promise.allSettled(options.endpoints.map((e) => dialCheck(e, tls, d.dialTimeoutMs, ETCD_PEER)));
  if (!dials.some((r) => r.status === 'fulfilled')) {
    const why = dials.map((r) => (r.status === 'rejected' ? (r.reason as Error).message : ''));
    throw new CliError(EXIT_UNREACHABLE, why.join('; '));
  }
  return createEtcdClient({
    endpoints: options.endpoints,
    tls: options.tls,
    auth: options.auth,
    callTimeoutMs: d.timeoutMs,
    ...(o.retryReads === true ? { retryReads: true } : {}),
  });
}

function str(v: string | Buffer | undefined): string | undefined {
  return v === undefined ? undefined : v.toString();
}

/**
 * `--region` against the region this etcd serves: reads its binding (`{prefix}/region`, written by `idgen region
 * init`) and refuses another code with one line, exit 2, as the node does (`this etcd serves region 2, not region
 * 1`): a mistyped region would otherwise show an empty table or "no serving node". The etcd's spare codes (its layout
 * record's) are its own too. An etcd never bound, or a binding that does not parse, is left to the verb (`idgen
 * leases` and `audit` report it). Dials first ({@link openEtcdClient}); closes its client.
 */
export async function refuseOtherRegion(connection: EtcdConnection, d: Deadlines, region: number): Promise<void> {
  const client = await openEtcdClient(connection, d, { retryReads: true });
  const prefix = connection.keyPrefix;
  const key = regionBindingKey(prefix);
  const where = `etcd ${connection.options.endpoints.join(',')}`;
  try {
    const [bindingRaw, layoutRaw] = await unreachableAfter(
      Promise.all([client.get(key).string(), client.get(leaseKeys.layout(prefix)).string()]),
      d.timeoutMs,
      where,
    );
    if (bindingRaw === null) return;
    let bound: number;
    try {
      bound = parseRegionBinding(key, bindingRaw, 1023).code;
    } catch {
      return;
    }
    if (bound === region) return;
    // A spare code (docs/design.md §7) may be minted through any region's etcd it was lent to.
    let spare: number[] = [];
    try {
      const layoutKey = leaseKeys.layout(prefix);
      const layout = layoutRaw === null ? DEFAULT_LAYOUT : createLayout(parseLayoutRecord(layoutKey, layoutRaw));
      spare = spareCodesOf(layoutKey, layoutRaw ?? undefined, layout.maxRegion);
    } catch {
      spare = [];
    }
    if (spare.includes(region)) return;
    throw new CliError(
      EXIT_USAGE,
      `${where}: this etcd serves region ${bound} (${key}), not region ${region}: check --region and --etcd`,
    );
  } finally {
    client.close();
  }
}

/** Opens an {@link EtcdReader}: dials etcd first ({@link openEtcdClient}). */
export async function openEtcdReader(connection: EtcdConnection, d: Deadlines): Promise<EtcdReader> {
  const { options } = connection;
  // One command deadline from here on (the dial had its own): each call gets what is left of it.
  const endAt = Date.now() + d.timeoutMs;
  const left = (): number => Math.max(1, endAt - Date.now());
  const client = await openEtcdClient(connection, d, { retryReads: true });
  const prefix = connection.keyPrefix;
  const where = `etcd ${options.endpoints.join(',')}`;
  const deadline = (): { deadline: Date } => ({ deadline: new Date(endAt) });

  return {
    async snapshot(regionsAsked) {
      const res = await unreachableAfter(
        client.getAll().prefix(`${prefix}/`).options(deadline()).exec(),
        left(),
        where,
        d.timeoutMs,
      );
      const byKey = new Map<string, IKeyValue>(res.kvs.map((kv) => [kv.key.toString('utf8'), kv]));
      const text = (key: string): string | undefined => byKey.get(key)?.value.toString('utf8');

      let layoutRecord: LayoutRecord | undefined;
      let layoutProblem: string | undefined;
      let layout = DEFAULT_LAYOUT;
      let layoutSpareCodes: number[] = [];
      const layoutKey = leaseKeys.layout(prefix);
      const layoutRaw = text(layoutKey);
      if (layoutRaw === undefined) layoutProblem = `no layout record at ${layoutKey}`;
      else {
        try {
          layoutRecord = parseLayoutRecord(layoutKey, layoutRaw);
          layout = createLayout(layoutRecord);
          layoutSpareCodes = spareCodesOf(layoutKey, layoutRaw, layout.maxRegion);
        } catch (e) {
          layoutRecord = undefined;
          layoutProblem = (e as Error).message;
        }
      }

      const regions = regionsAsked ?? Array.from({ length: layout.maxRegion + 1 }, (_, i) => i);
      const slots: SlotState[] = [];
      const nodes: ServingNode[] = [];
      const unreadableNodes: string[] = [];
      for (const region of regions) {
        // Exact keys from the lease package's builders: the CLI never parses a key back into its parts.
        for (let worker = 0; worker <= layout.maxWorker; worker++) {
          const workerKey = leaseKeys.worker(prefix, region, worker);
          const lastKey = leaseKeys.lastMs(prefix, region, worker);
          const workerKv = byKey.get(workerKey);
          const lastRaw = text(lastKey);
          if (workerKv === undefined && lastRaw === undefined) continue;
          const corrupt: string[] = [];
          let holder: SlotState['holder'];
          if (workerKv !== undefined) {
            const record = parseWorkerRecord(workerKv.value.toString('utf8'));
            if (record === undefined) corrupt.push(`${workerKey}: unreadable holder record`);
            holder = {
              ...(record ?? { nodeId: '?', kind: 'service', address: '', startedAt: '' }),
              leaseId: workerKv.lease,
            };
          }
          let lastMs: LastMsRecord | undefined;
          if (lastRaw !== undefined) {
            try {
              lastMs = parseLastMsRecord(lastKey, lastRaw);
            } catch (e) {
              corrupt.push((e as Error).message);
            }
          }
          slots.push({ region, worker, holder, lastMs, corrupt });
        }
        const dir = leaseKeys.nodes(prefix, region);
        for (const [key, kv] of byKey) {
          if (!key.startsWith(dir)) continue;
          try {
            nodes.push(parseServingNode(key, kv.value.toString('utf8')));
          } catch (e) {
            unreadableNodes.push((e as Error).message);
          }
        }
      }
      const spareCodes = new Map<number, SpareCodeRecord>();
      const spareProblems: string[] = [];
      const spareDir = spareKeys.all(prefix);
      for (const [key, kv] of byKey) {
        if (!key.startsWith(spareDir)) continue;
        try {
          const record = parseSpareCodeRecord(key, kv.value.toString('utf8'), layout.maxRegion);
          spareCodes.set(record.code, record);
        } catch (e) {
          spareProblems.push((e as Error).message);
        }
      }
      return {
        revision: res.header.revision,
        layoutRecord,
        layoutProblem,
        layout,
        layoutSpareCodes,
        slots,
        nodes,
        unreadableNodes,
        spareCodes,
        spareProblems,
      };
    },

    async leaseTtls(leaseIds) {
      const ids = [...new Set(leaseIds)].filter((id) => id !== '0');
      const answers = await unreachableAfter(
        Promise.all(ids.map((ID) => client.leaseClient.leaseTimeToLive({ ID }, deadline()))),
        left(),
        where,
        d.timeoutMs,
      );
      return new Map(ids.map((id, i) => [id, Number(answers[i]?.TTL ?? -1)]));
    },

    remainingMs: left,

    close() {
      client.close();
    },
  };
}
