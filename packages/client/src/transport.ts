import { Code, ConnectError } from '@connectrpc/connect';
import type { IdBlock } from './id-buffer.js';

/** One generator node as the client addresses it. */
export interface NodeTarget {
  /** Base URL, e.g. `http://127.0.0.1:8080` (`https://…` with TLS). */
  readonly url: string;
  /** Region code the node serves (its IDs carry it). */
  readonly region: number;
  /** TLS name to verify when the URL's host is an IP that name resolved to (DNS discovery). */
  readonly servername?: string;
}

/** Options of one `NextIds` attempt. */
export interface AttemptOptions {
  /** Aborted when the attempt times out or the client closes. */
  readonly signal: AbortSignal;
  /** The attempt's time budget, to forward to the server as the RPC deadline. */
  readonly timeoutMs: number;
}

/**
 * How the client talks to one node: `NextIds(count)` and nothing else. The real one is
 * {@link createConnectTransport} (Connect or gRPC over HTTP/2); unit tests inject a fake.
 * Failures are thrown as `ConnectError` (or Node.js errors with a `code` such as `ECONNREFUSED`).
 */
export interface IdTransport {
  nextIds(count: number, options: AttemptOptions): Promise<readonly IdBlock[]>;
  /** Closes the node's connection; called when the node leaves discovery or the client closes. */
  close(): void;
}

/** Creates the transport of one node (called lazily, once per node address). */
export type IdTransportFactory = (target: NodeTarget) => IdTransport;

/** How the client reacts to a failed attempt. */
export interface ClassifiedFailure {
  /**
   * `node`: this node cannot serve now (UNAVAILABLE, refused or reset connection, deadline, a broken
   * response): mark it unhealthy and try the next node at once (docs/design.md §7).
   * `request`: the request itself is wrong (INVALID_ARGUMENT and kin): every node would say the same,
   * so it is not retried elsewhere.
   */
  readonly kind: 'node' | 'request';
  /** Connect code in snake case (`unavailable`, `deadline_exceeded`, …). */
  readonly code: string;
  readonly message: string;
}

/** Codes that describe the request, not the node: retrying them on another node cannot help. */
const REQUEST_CODES: ReadonlySet<Code> = new Set([
  Code.InvalidArgument,
  Code.OutOfRange,
  Code.PermissionDenied,
  Code.Unauthenticated,
]);

/** Node.js error codes of a connection that could not be made or broke. */
const CONNECTION_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH']);

/** `InvalidArgument` → `invalid_argument`. */
export function codeName(code: Code): string {
  const name = Code[code] ?? String(code);
  return name.replace(/[A-Z]/g, (c, i: number) => (i === 0 ? c.toLowerCase() : `_${c.toLowerCase()}`));
}

/** Sorts a failed attempt into "try another node" or "the request is wrong". */
export function classifyFailure(e: unknown): ClassifiedFailure {
  const errno = errnoOf(e);
  if (errno !== undefined && CONNECTION_ERRNOS.has(errno)) {
    return { kind: 'node', code: 'unavailable', message: messageOf(e) };
  }
  const ce = ConnectError.from(e);
  return {
    kind: REQUEST_CODES.has(ce.code) ? 'request' : 'node',
    code: codeName(ce.code),
    message: ce.rawMessage,
  };
}

/** The first Node.js error code (`ECONNREFUSED`, …) along the `cause` chain. */
function errnoOf(e: unknown): string | undefined {
  // Duck-typed, not `instanceof Error`: errors from another realm (vm contexts, test runners) fail that.
  let cur: unknown = e;
  for (let depth = 0; typeof cur === 'object' && cur !== null && depth < 5; depth++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    cur = (cur as { cause?: unknown }).cause;
  }
  return undefined;
}

function messageOf(e: unknown): string {
  const message = typeof e === 'object' && e !== null ? (e as { message?: unknown }).message : undefined;
  return typeof message === 'string' ? message : String(e);
}
