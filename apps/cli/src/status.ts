import { EXIT_OK, EXIT_PROBLEM, EXIT_UNREACHABLE, CliError, usageError, type ExitCode } from './exit-codes.js';
import type { VerbContext } from './context.js';
import { openEtcdReader, refuseOtherRegion } from './etcd-state.js';
import { fetchStatuses, type NodeStatus } from './node-status.js';
import {
  deadlines,
  etcdConnection,
  etcdctlEndpointsSet,
  integerOption,
  nodeTls,
  nodeUrl,
  serverUrl,
  type EtcdFlags,
  type NodeTlsFlags,
} from './options.js';
import { isoTime, renderTable } from './table.js';

/** Flags of `idgen status`. */
export interface StatusFlags extends EtcdFlags, NodeTlsFlags {
  server?: string;
  region?: string;
  timeoutMs: string;
  json: boolean;
}

/** A node to ask, and how etcd knows it. */
interface Target {
  readonly url: string;
  readonly nodeId: string;
  /** Region and worker as etcd records them (shown for a node that does not answer). */
  readonly region?: number;
  readonly worker?: number;
  /** In discovery (`nodes/`): callers are sent to it. */
  readonly registered: boolean;
}

/**
 * `idgen status`: GetStatus of one node (`--server`), or of every node etcd knows in the region (or all
 * regions): the nodes in discovery and the `service` holders of worker slots (a node waiting for its
 * floor, or fenced and claiming again, holds a slot but is not in discovery). Exit 1 if any is not serving.
 */
export async function runStatus(flags: StatusFlags, ctx: VerbContext): Promise<ExitCode> {
  const d = deadlines(flags);
  const tls = nodeTls(flags);
  if (flags.server !== undefined && flags.etcd !== undefined) throw usageError('give either --server or --etcd');
  if (flags.server === undefined && flags.etcd === undefined && !etcdctlEndpointsSet())
    throw usageError('give either --server or --etcd (or IDGEN_ETCD, or ETCDCTL_ENDPOINTS)');
  let targets: Target[];
  let nodeTimeoutMs = d.timeoutMs;
  if (flags.server !== undefined) {
    targets = [{ url: serverUrl(flags.server, tls !== undefined), nodeId: '', registered: false }];
  } else {
    const region = flags.region === undefined ? undefined : integerOption('--region', flags.region, 0, 1023);
    const connection = etcdConnection(flags);
    if (region !== undefined) await refuseOtherRegion(connection, d, region);
    const reader = await openEtcdReader(connection, d);
    try {
      const snapshot = await reader.snapshot(region === undefined ? undefined : [region]);
      const byUrl = new Map<string, Target>();
      const add = (address: string, t: Omit<Target, 'url'>): void => {
        if (address === '') return;
        const url = nodeUrl(address, tls !== undefined);
        const seen = byUrl.get(url);
        byUrl.set(url, {
          ...t,
          url,
          registered: t.registered || (seen?.registered ?? false),
        });
      };
      for (const n of snapshot.nodes)
        add(n.address, { nodeId: n.nodeId, region: n.region, worker: n.worker, registered: true });
      for (const s of snapshot.slots) {
        if (s.holder?.kind !== 'service') continue;
        add(s.holder.address, { nodeId: s.holder.nodeId, region: s.region, worker: s.worker, registered: false });
      }
      targets = [...byUrl.values()];
      nodeTimeoutMs = reader.remainingMs();
    } finally {
      reader.close();
    }
  }
  const statuses = await fetchStatuses(
    targets.map((t) => t.url),
    nodeTimeoutMs,
    tls,
    d.dialTimeoutMs,
  );
  // A node that did not answer is shown as etcd knows it (node id, region, worker).
  const rows: StatusRow[] = statuses.map((s, i) => {
    const t = targets[i];
    if (t === undefined || flags.server !== undefined) return s;
    const known = s.state === 'unreachable' ? { nodeId: t.nodeId, region: t.region, worker: t.worker } : {};
    return { ...s, ...known, registered: t.registered };
  });
  rows.sort(
    (a, b) => (a.region ?? -1) - (b.region ?? -1) || (a.worker ?? -1) - (b.worker ?? -1) || a.url.localeCompare(b.url),
  );
  const notServing = rows.filter((s) => s.state !== 'serving');
  if (flags.server !== undefined && notServing[0]?.state === 'unreachable') {
    throw new CliError(EXIT_UNREACHABLE, `${notServing[0].url}: ${notServing[0].error ?? 'no answer'}`);
  }
  if (flags.json) ctx.io.out(JSON.stringify({ nodes: rows }));
  else {
    for (const line of renderStatusTable(rows, flags.server === undefined, ctx.nowMs())) ctx.io.out(line);
    for (const line of mixedVersionLines(rows)) ctx.io.out(line);
  }
  if (rows.length === 0) {
    ctx.io.err(
      `idgen status: no nodes found in etcd${flags.region === undefined ? '' : ` for region ${flags.region}`}`,
    );
    return EXIT_PROBLEM;
  }
  return notServing.length > 0 ? EXIT_PROBLEM : EXIT_OK;
}

/** One row: the node's status and, when read through etcd, whether it is in discovery. */
type StatusRow = NodeStatus & { readonly registered?: boolean };

function renderStatusTable(rows: readonly StatusRow[], fromEtcd: boolean, nowMs: number): string[] {
  const headers = [
    'NODE',
    'ADDRESS',
    'REGION',
    'WORKER',
    'STATE',
    'READINESS',
    'FENCE',
    'KEEPALIVE',
    'CLOCK',
    'FLOOR',
    'LAST-MINTED',
  ];
  if (fromEtcd) headers.push('DISCOVERY');
  headers.push('VERSION');
  const cells = rows.map((s) => {
    const r = [
      s.nodeId ?? '',
      s.url.replace(/^http:\/\//, ''),
      s.region === undefined ? '' : String(s.region),
      s.worker === undefined ? '' : String(s.worker),
      s.state,
      readinessCell(s),
      s.state === 'unreachable' ? (s.error ?? '') : (s.fenceReason ?? ''),
      s.keepAliveAgeSeconds === undefined ? '' : `${s.keepAliveAgeSeconds.toFixed(1)}s ago`,
      clockCell(s),
      s.detailsRedacted === true ? 'redacted' : s.floorMs === undefined ? '' : isoTime(s.floorMs),
      s.detailsRedacted === true
        ? 'redacted'
        : s.lastMintedMs === undefined
          ? ''
          : `${((nowMs - s.lastMintedMs) / 1000).toFixed(1)}s ago`,
    ];
    if (fromEtcd) r.push(s.registered === true ? 'yes' : 'no');
    r.push(s.state === 'unreachable' ? '' : versionLabel(s));
    return r;
  });
  return renderTable(headers, cells);
}

/** Characters of a git hash shown (git's own default abbreviation). */
const SHORT_COMMIT = 7;

/**
 * `0.1.0+4b6f761`: the release and the short commit (semver's build-metadata form, one word for the table);
 * `0.1.0` without a commit, `unknown` from a server before GetStatus carried them (fields 25-26).
 */
export function versionLabel(s: Pick<NodeStatus, 'version' | 'commit'>): string {
  const version = s.version === undefined || s.version === '' ? 'unknown' : s.version;
  const commit = s.commit ?? '';
  if (commit === '') return version;
  return `${version}+${/^[0-9a-f]{40,64}$/.test(commit) ? commit.slice(0, SHORT_COMMIT) : commit}`;
}

/**
 * One line per region whose answering nodes run more than one version (a rollout under way, or one left
 * behind): `region 2: mixed versions: 0.1.0+4b6f761 (2 nodes), 0.2.0+9c1e2aa (1)`, most-run first.
 */
export function mixedVersionLines(rows: readonly NodeStatus[]): string[] {
  const byRegion = new Map<number, Map<string, number>>();
  for (const s of rows) {
    if (s.state === 'unreachable' || s.region === undefined) continue;
    const counts = byRegion.get(s.region) ?? new Map<string, number>();
    const label = versionLabel(s);
    counts.set(label, (counts.get(label) ?? 0) + 1);
    byRegion.set(s.region, counts);
  }
  const lines: string[] = [];
  for (const [region, counts] of [...byRegion].sort(([a], [b]) => a - b)) {
    if (counts.size < 2) continue;
    const parts = [...counts]
      .sort(([a, n], [b, m]) => m - n || a.localeCompare(b))
      .map(([label, n], i) => `${label} (${n}${i === 0 ? (n === 1 ? ' node' : ' nodes') : ''})`);
    lines.push(`region ${region}: mixed versions: ${parts.join(', ')}`);
  }
  return lines;
}

/** `ready`, `waiting-for-floor 3.5s`, `fenced: lease`, `time-source-unavailable: not-synchronised`. */
function readinessCell(s: NodeStatus): string {
  if (s.readinessReason === undefined) return '';
  const cause = s.readinessCause ? `: ${s.readinessCause}` : '';
  const wait = s.readinessWaitMs === undefined ? '' : ` ${(s.readinessWaitMs / 1000).toFixed(1)}s`;
  return `${s.readinessReason}${cause}${wait}`;
}

function clockCell(s: NodeStatus): string {
  if (s.clockState === undefined) return '';
  if (s.clockOffsetSeconds === undefined) return s.clockState;
  const ms = s.clockOffsetSeconds * 1000;
  return `${s.clockState} ${ms >= 0 ? '+' : ''}${ms.toFixed(3)}ms`;
}
