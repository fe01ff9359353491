import { ConnectError, createClient, type Client } from '@connectrpc/connect';
import { Http2SessionManager, createConnectTransport } from '@connectrpc/connect-node';
import { NODE_PEER, dialCheck } from './dial.js';
import {
  ClockState,
  FenceReason,
  IdGenerator,
  LeaseMode,
  NodeState,
  ReadinessReason,
  type GetStatusResponse,
} from '@idgen/proto';

/** `FENCE_REASON_WAITING_FOR_FLOOR` → `waiting-for-floor` (the names the server logs and counts). */
export function enumName(e: Record<number, string>, value: number): string {
  return (e[value] ?? String(value)).toLowerCase().replace(/_/g, '-');
}

/** One node's GetStatus, flattened for a table row and for `--json` (docs/design.md §6). */
export interface NodeStatus {
  /** Where the CLI asked. */
  readonly url: string;
  /** `serving`, `starting`, `fenced`, `draining`, or `unreachable` when the call failed. */
  readonly state: string;
  readonly nodeId?: string;
  readonly region?: number;
  readonly worker?: number;
  /** May it mint now (what `/readyz` answers 200 for); the readiness fields are absent from a server without them. */
  readonly ready?: boolean;
  /** Why it is or is not ready: `ready`, `starting`, `waiting-for-floor`, `fenced`, `etcd-unreachable`, … */
  readonly readinessReason?: string;
  /** The sub-case (the fence reason, the time source's problem); empty otherwise. */
  readonly readinessCause?: string;
  readonly readinessDetail?: string;
  /** While waiting for the floor: milliseconds left. */
  readonly readinessWaitMs?: number;
  /** Empty while the node may mint. */
  readonly fenceReason?: string;
  readonly fenceMessage?: string;
  readonly leaseMode?: string;
  readonly leaseId?: string;
  readonly keepAliveAgeSeconds?: number;
  readonly fenceDeadlineInMs?: number;
  readonly clockState?: string;
  readonly clockOffsetSeconds?: number;
  readonly clockMessage?: string;
  /** The lowest Unix ms the holder may mint in; absent while no slot is held, or the slot was never minted in. */
  readonly floorMs?: number;
  /** The last Unix ms the node minted in; absent if none. */
  readonly lastMintedMs?: number;
  readonly advertiseAddress?: string;
  readonly maxCount?: number;
  /** Why the call failed (state `unreachable`). */
  readonly error?: string;
  /** The node left out the lease id, deadline, floor and last minted ms (it did not authenticate this caller). */
  readonly detailsRedacted?: boolean;
  /** The idgen release the node runs (GetStatus field 25); empty from a server before it. */
  readonly version?: string;
  /** The source commit it runs (field 26; a git hash, or what IDGEN_COMMIT said); empty when unknown. */
  readonly commit?: string;
}

function flatten(url: string, s: GetStatusResponse): NodeStatus {
  return {
    url,
    state: enumName(NodeState, s.state),
    nodeId: s.nodeId,
    region: s.region,
    ...(s.worker !== undefined ? { worker: s.worker } : {}),
    // A server from before readiness (fields 19-23) sends none of it: nothing to show then.
    ...(s.readinessReason === ReadinessReason.UNSPECIFIED
      ? {}
      : {
          ready: s.ready,
          readinessReason: enumName(ReadinessReason, s.readinessReason),
          readinessCause: s.readinessCause,
          readinessDetail: s.readinessDetail,
          ...(s.readinessWaitMs !== undefined ? { readinessWaitMs: Number(s.readinessWaitMs) } : {}),
        }),
    fenceReason: s.fenceReason === FenceReason.UNSPECIFIED ? '' : enumName(FenceReason, s.fenceReason),
    fenceMessage: s.fenceMessage,
    leaseMode: enumName(LeaseMode, s.leaseMode),
    leaseId: s.leaseId,
    ...(s.keepAliveAgeSeconds !== undefined ? { keepAliveAgeSeconds: s.keepAliveAgeSeconds } : {}),
    ...(s.fenceDeadlineInMs !== undefined ? { fenceDeadlineInMs: Number(s.fenceDeadlineInMs) } : {}),
    clockState: enumName(ClockState, s.clockState),
    ...(s.clockOffsetSeconds !== undefined ? { clockOffsetSeconds: s.clockOffsetSeconds } : {}),
    clockMessage: s.clockMessage,
    // A slot never minted in has the epoch − 1 as its floor: no floor worth showing.
    ...(s.detailsRedacted ? { detailsRedacted: true } : {}),
    ...(!s.detailsRedacted && s.floorMs > 0n && (s.layout === undefined || s.floorMs >= s.layout.epochMs)
      ? { floorMs: Number(s.floorMs) }
      : {}),
    ...(!s.detailsRedacted && s.lastMintedMs >= 0n ? { lastMintedMs: Number(s.lastMintedMs) } : {}),
    advertiseAddress: s.advertiseAddress,
    maxCount: s.maxCount,
    version: s.version,
    commit: s.commit,
  };
}

/** TLS for `https://` nodes: the CA that signed them, and the client certificate mTLS nodes ask for (PEM text). */
export interface NodeTls {
  readonly ca?: string;
  readonly cert?: string;
  readonly key?: string;
  /** The name their certificates carry when dialled by another (`--tls-servername`). */
  readonly servername?: string;
}

/**
 * Why a call to a node failed, in one line: the connection library says "stream closed with error code CANCEL" or
 * "read ECONNRESET" for a plaintext dial to a TLS port and for a missing client certificate alike, so the node is
 * dialled once more ({@link dialCheck}) to name the cause ("this node speaks TLS", "this node wants a client
 * certificate", a wrong CA); the library's message when the dial finds nothing wrong.
 */
export async function explainNodeFailure(
  url: string,
  message: string,
  tls: NodeTls | undefined,
  dialTimeoutMs: number,
): Promise<string> {
  try {
    await dialCheck(url, tls, dialTimeoutMs, NODE_PEER);
  } catch (d) {
    return (d as Error).message.replace(/^node [^ ]+: /, '');
  }
  return message;
}

/**
 * Asks each node for its status at once (Connect, binary, over HTTP/2: what `@idgen/client` speaks).
 * A node that does not answer within `timeoutMs` is reported `unreachable`, never thrown.
 */
export async function fetchStatuses(
  urls: readonly string[],
  timeoutMs: number,
  tls?: NodeTls,
  dialTimeoutMs = timeoutMs,
): Promise<NodeStatus[]> {
  return Promise.all(
    urls.map(async (url): Promise<NodeStatus> => {
      // One session per node, closed when done, so the CLI exits at once (no idle HTTP/2 session left).
      const sessionManager = new Http2SessionManager(url, undefined, tls ?? {});
      const client: Client<typeof IdGenerator> = createClient(
        IdGenerator,
        createConnectTransport({ baseUrl: url, httpVersion: '2', useBinaryFormat: true, sessionManager }),
      );
      try {
        return flatten(url, await client.getStatus({}, { timeoutMs }));
      } catch (e) {
        return {
          url,
          state: 'unreachable',
          error: await explainNodeFailure(url, ConnectError.from(e).message, tls, dialTimeoutMs),
        };
      } finally {
        sessionManager.abort();
      }
    }),
  );
}
