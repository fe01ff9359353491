import { MAX_NEXT_IDS, createIdClient, isIdClientError, isIdsUnavailableError, type IdClient } from '@idgen/client';
import { createDiscoveryReader, type ServingNode } from '@idgen/discovery';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { ETCD_PEER, dialCheck } from './dial.js';
import { refuseOtherRegion, unreachableAfter } from './etcd-state.js';
import { explainNodeFailure, fetchStatuses, type NodeTls } from './node-status.js';
import { EXIT_OK, EXIT_PROBLEM, EXIT_UNREACHABLE, CliError, usageError, type ExitCode } from './exit-codes.js';
import type { VerbContext } from './context.js';
import {
  deadlines,
  etcdConnection,
  etcdctlEndpointsSet,
  integerOption,
  nodeTls,
  serverUrl,
  type EtcdFlags,
  type NodeTlsFlags,
} from './options.js';

/** Flags of `idgen next`. */
export interface NextFlags extends EtcdFlags, NodeTlsFlags {
  count: string;
  server?: string;
  region?: string;
  timeoutMs: string;
  json: boolean;
}

/** The largest region code: the layout's (docs/design.md §1: 3 region bits, 0-7), checked before any I/O. */
const MAX_REGION_CODE = DEFAULT_LAYOUT.maxRegion;

/** The region a node serves, from its GetStatus; an exit-3 {@link CliError} when it does not answer. */
async function nodeRegion(url: string, timeoutMs: number, tls: NodeTls | undefined, dialMs: number): Promise<number> {
  const [s] = await fetchStatuses([url], timeoutMs, tls, dialMs);
  if (s === undefined || s.state === 'unreachable' || s.region === undefined)
    throw new CliError(EXIT_UNREACHABLE, `no IDs from ${url} within ${timeoutMs} ms (${s?.error ?? 'no answer'})`);
  return s.region;
}

/**
 * `idgen next`: `-n` IDs from one node (`--server`) or from the region's serving nodes listed by
 * `@idgen/discovery`'s reader (`--etcd --region`), through `@idgen/client` (its balancing over the nodes,
 * moving past a failed one, and it never invents an ID).
 */
export async function runNext(flags: NextFlags, ctx: VerbContext): Promise<ExitCode> {
  const count = integerOption('-n', flags.count, 1, MAX_NEXT_IDS);
  const { timeoutMs, dialTimeoutMs } = deadlines(flags);
  const tls = nodeTls(flags);
  if (flags.server !== undefined && flags.etcd !== undefined)
    throw usageError('give either --server or --etcd (with --region)');
  if (flags.server === undefined && flags.etcd === undefined && !etcdctlEndpointsSet())
    throw usageError('give either --server or --etcd (or IDGEN_ETCD, or ETCDCTL_ENDPOINTS) with --region');
  const region = flags.region === undefined ? undefined : integerOption('--region', flags.region, 0, MAX_REGION_CODE);
  let client: IdClient;
  let firstNode: string | undefined;
  if (flags.server !== undefined) {
    const url = serverUrl(flags.server, tls !== undefined);
    firstNode = url;
    // The client refuses IDs of a region that is not its own (a node on the wrong region must not go unnoticed):
    // --region is checked against the node's IDs; without it the node's own region (its GetStatus) is taken.
    client = createIdClient({
      region: region ?? (await nodeRegion(url, timeoutMs, tls, dialTimeoutMs)),
      nodes: [url],
      ...(tls === undefined ? {} : { tls }),
      prefill: false,
      deadlineMs: timeoutMs,
      attemptTimeoutMs: timeoutMs,
      keepAlive: { intervalMs: 0 },
    });
  } else {
    if (region === undefined) throw usageError('--etcd needs --region (the region whose nodes to ask)');
    const connection = etcdConnection(flags);
    const etcdTls = connection.options.tls;
    const where = `etcd ${connection.options.endpoints.join(',')}`;
    // Dialled first, within the dial timeout: the discovery reader's gRPC channel is only opened to an etcd that answers.
    await Promise.any(
      connection.options.endpoints.map((e) =>
        dialCheck(
          e,
          etcdTls === undefined
            ? undefined
            : { ca: etcdTls.ca?.toString(), cert: etcdTls.cert?.toString(), key: etcdTls.key?.toString() },
          dialTimeoutMs,
          ETCD_PEER,
        ),
      ),
    ).catch((e: AggregateError) => {
      throw new CliError(EXIT_UNREACHABLE, e.errors.map((x: Error) => x.message).join('; '));
    });
    await refuseOtherRegion(connection, { timeoutMs, dialTimeoutMs }, region);
    // One list of the region's serving nodes (the discovery records nodes write, docs/design.md §5), not a watch: the
    // CLI lives for one call, and an etcd watch left retrying would keep the process alive.
    const discovery = createDiscoveryReader({ ...connection.options, region, requestTimeoutMs: timeoutMs });
    let nodes: ServingNode[];
    try {
      nodes = await unreachableAfter(discovery.list(), timeoutMs, where);
    } finally {
      await discovery.close();
    }
    if (nodes.length === 0)
      throw new CliError(EXIT_PROBLEM, `no serving node in region ${region} (${where}, prefix ${flags.etcdPrefix})`);
    client = createIdClient({
      region,
      nodes: nodes.map((n) => n.address),
      ...(tls === undefined ? {} : { tls }),
      prefill: false,
      deadlineMs: timeoutMs,
      keepAlive: { intervalMs: 0 },
    });
  }
  try {
    const ids = await client.nextIds(count);
    if (flags.json) ctx.io.out(JSON.stringify({ ids: ids.map(String) }));
    else for (const id of ids) ctx.io.out(String(id));
    return EXIT_OK;
  } catch (e) {
    if (isIdsUnavailableError(e)) {
      // With --server the client's region label means nothing to the operator: name the node instead.
      const last = e.attempts[e.attempts.length - 1];
      // The node dialled once more names the cause ("this node speaks TLS", "wants a client certificate").
      const node = firstNode ?? last?.node;
      const said = last === undefined ? e.message : `${last.code}: ${last.message}`;
      const cause =
        node === undefined ? undefined : await explainNodeFailure(node, said, tls, Math.min(dialTimeoutMs, timeoutMs));
      const message =
        flags.server !== undefined && flags.region === undefined
          ? `no IDs from ${firstNode} within ${timeoutMs} ms${cause === undefined ? '' : ` (${cause})`}`
          : `${e.message}${cause === undefined || node === undefined ? '' : ` (${node}: ${cause})`}`;
      throw new CliError(EXIT_UNREACHABLE, message);
    }
    if (isIdClientError(e)) throw new CliError(EXIT_PROBLEM, e.message);
    throw e;
  } finally {
    await client.close();
  }
}
