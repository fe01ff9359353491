import { MAX_NEXT_IDS, createIdClient, isIdClientError, isIdsUnavailableError, type IdClient } from '@idgen/client';
import { createDiscoveryReader, type ServingNode } from '@idgen/discovery';
import { unreachableAfter } from './etcd-state.js';
import { EXIT_OK, EXIT_PROBLEM, EXIT_UNREACHABLE, CliError, usageError, type ExitCode } from './exit-codes.js';
import type { VerbContext } from './context.js';
import { etcdConnection, integerOption, serverUrl, type EtcdFlags } from './options.js';

/** Flags of `idgen next`. */
export interface NextFlags extends EtcdFlags {
  count: string;
  server?: string;
  region?: string;
  timeoutMs: string;
  json: boolean;
}

/** The largest region code the client accepts; the layout decides the real bound (3 bits: 0-7). */
const MAX_REGION_CODE = 1023;

/**
 * `idgen next`: `-n` IDs from one node (`--server`) or from the region's serving nodes listed by
 * `@idgen/discovery`'s reader (`--etcd --region`), through `@idgen/client` (its balancing over the nodes,
 * moving past a failed one, and it never invents an ID).
 */
export async function runNext(flags: NextFlags, ctx: VerbContext): Promise<ExitCode> {
  const count = integerOption('-n', flags.count, 1, MAX_NEXT_IDS);
  const timeoutMs = integerOption('--timeout-ms', flags.timeoutMs, 1, 600_000);
  if ((flags.server === undefined) === (flags.etcd === undefined))
    throw usageError('give either --server or --etcd (with --region)');
  let client: IdClient;
  if (flags.server !== undefined) {
    const url = serverUrl(flags.server);
    // The region only labels the node in the client's messages: the node stamps its own into the IDs.
    const region = flags.region === undefined ? 0 : integerOption('--region', flags.region, 0, MAX_REGION_CODE);
    client = createIdClient({
      region,
      nodes: [url],
      prefill: false,
      deadlineMs: timeoutMs,
      attemptTimeoutMs: timeoutMs,
      keepAlive: { intervalMs: 0 },
    });
  } else {
    if (flags.region === undefined) throw usageError('--etcd needs --region (the region whose nodes to ask)');
    const region = integerOption('--region', flags.region, 0, MAX_REGION_CODE);
    // One list of the region's serving nodes (the discovery records nodes write, docs/design.md §5), not a watch: the
    // CLI lives for one call, and an etcd watch left retrying would keep the process alive.
    const discovery = createDiscoveryReader({ ...etcdConnection(flags).options, region, requestTimeoutMs: timeoutMs });
    let nodes: ServingNode[];
    try {
      nodes = await unreachableAfter(discovery.list(), timeoutMs, `etcd ${flags.etcd}`);
    } finally {
      await discovery.close();
    }
    if (nodes.length === 0)
      throw new CliError(
        EXIT_PROBLEM,
        `no serving node in region ${region} (etcd ${flags.etcd}, prefix ${flags.etcdPrefix})`,
      );
    client = createIdClient({
      region,
      nodes: nodes.map((n) => n.address),
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
      const message =
        flags.server !== undefined && flags.region === undefined
          ? `no IDs from ${serverUrl(flags.server)} within ${timeoutMs} ms${last === undefined ? '' : ` (${last.code}: ${last.message})`}`
          : e.message;
      throw new CliError(EXIT_UNREACHABLE, message);
    }
    if (isIdClientError(e)) throw new CliError(EXIT_PROBLEM, e.message);
    throw e;
  } finally {
    await client.close();
  }
}
