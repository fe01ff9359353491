import type { IncomingHttpHeaders } from 'node:http';
import { ConnectError, type Code } from '@connectrpc/connect';
import { codecFor, idsIn, type NextIdsCodec } from './nextids-codec.js';
import type { WireBlock } from './service.js';
import type { FastPath, Responder } from './transport/contracts.js';

export { countOf } from './nextids-codec.js';

/** The RPC path the fast path answers. */
export const NEXT_IDS_PATH = '/idgen.v1.IdGenerator/NextIds';

/** Options of {@link createNextIdsFastPath}. */
export interface FastPathOptions {
  /**
   * NextIds without the protocol (service.ts `createNextIds`): blocks now, or later (a promise) when they need
   * a millisecond still to come; throws (or rejects with) a ConnectError. `owner`: the connection, for fairness.
   */
  readonly nextIds: (
    count: number,
    owner?: object,
    abandoned?: () => boolean,
  ) => readonly WireBlock[] | Promise<readonly WireBlock[]>;
  readonly maxBodyBytes: number;
  /** Records one call for metrics: its code (`ok`, `invalid_argument`, …) and start (hrtime ns). */
  readonly record?: (code: Code | undefined, startNs: bigint, ids: number) => void;
}

/**
 * NextIds for the common requests, answered straight on node:http/http2 instead of through connect-es.
 *
 * Why: on this stack connect-es spends most of a small call on per-request machinery (abort controllers and
 * their DOMExceptions, async iterables, promise chains), not on minting; measured on 2 cores, a NextIds(1)
 * through it ran at ~15% of a bare node:http2 handler. The issue's budget is ≥ 60%. The wire formats are
 * small and fixed (docs/design.md §6): nextids-codec.ts writes them by hand, checked against the generated clients
 * by the integration suites (apps/server/test/cluster.spec.ts), which talk to this path over all three protocols.
 *
 * HTTP/2 requests on node:http2 are answered on its core stream API: its compat layer (an Http2ServerRequest and
 * Http2ServerResponse with their streams and listeners per request) cost about a third of a NextIds(1), and
 * `bench:server`'s bare ceiling answers on the core API too.
 *
 * Taken only for what {@link codecFor} takes (POST, Connect unary JSON or binary without compression, gRPC over
 * HTTP/2 without compression). Everything else (gRPC-Web, compressed bodies, GET, other methods) returns `false`
 * and goes to connect-es, so behaviour there is unchanged.
 *
 * Transport-independent, as connect-node's universal handler: each front end reads the request its own way
 * (transport/: the dispatcher asks `codecFor` for the method and headers once, and the front end reads the body
 * up to `maxBodyBytes` with transport/body-readers.ts) and hands it to `mint`, with an answer callback of one line that calls `answer`: the answer
 * is written once, through the transport's {@link Responder}. (The callback is the reader's: made in the reader's
 * own scope, it allocates no context more per request than the fast path before its rooms.)
 */
export function createNextIdsFastPath(options: FastPathOptions): FastPath {
  return new NextIdsFastPath(options);
}

class NextIdsFastPath implements FastPath {
  readonly path = NEXT_IDS_PATH;
  readonly maxBodyBytes: number;
  private readonly record: FastPathOptions['record'];

  constructor(private readonly options: FastPathOptions) {
    this.maxBodyBytes = options.maxBodyBytes;
    this.record = options.record;
  }

  codecFor(
    method: string | undefined,
    headers: IncomingHttpHeaders | Readonly<Record<string, string>>,
    http2: boolean,
  ): NextIdsCodec | undefined {
    return method === 'POST' ? codecFor(headers, http2) : undefined;
  }

  /**
   * Mints for a request body and calls `answer` with the blocks or the error to answer (a body the caller got
   * wrong, or a fence): at once when the current millisecond can serve it, else from the mint scheduler's timer.
   */
  mint(
    codec: NextIdsCodec,
    body: Buffer,
    owner: object,
    abandoned: () => boolean,
    answer: (r: readonly WireBlock[] | ConnectError) => void,
  ): void {
    let minted: readonly WireBlock[] | Promise<readonly WireBlock[]>;
    try {
      minted = this.options.nextIds(codec.decodeCount(body), owner, abandoned);
    } catch (e) {
      answer(ConnectError.from(e));
      return;
    }
    if (minted instanceof Promise) minted.then(answer, (e: unknown) => answer(ConnectError.from(e)));
    else answer(minted);
  }

  /** The one answer to a call, on any transport: nothing when the caller went away while the IDs waited. */
  answer<T>(
    responder: Responder<T>,
    target: T,
    codec: NextIdsCodec,
    blocks: readonly WireBlock[] | ConnectError,
    start: bigint,
  ): void {
    if (responder.gone(target)) return;
    if (blocks instanceof ConnectError) {
      this.refuse(responder, target, codec, blocks, start, false);
      return;
    }
    responder.ok(target, codec, codec.encodeBlocks(blocks));
    this.record?.(undefined, start, idsIn(blocks));
  }

  /** An error answer (`dropBody`: the request body is not read to its end), counted. */
  refuse<T>(
    responder: Responder<T>,
    target: T,
    codec: NextIdsCodec,
    error: ConnectError,
    start: bigint,
    dropBody: boolean,
  ): void {
    this.record?.(error.code, start, 0);
    responder.error(target, codec, error, dropBody);
  }
}
