import type { ConnectError } from '@connectrpc/connect';
import type { NextIdsCodec } from './nextids-codec.js';

/**
 * How a transport writes the fast path's answer (fast-path.ts): implemented once by each (front-http1.ts,
 * front-idgen-h2.ts, front-node-http2.ts) as one object for the life of the process, the request's stream or
 * response passed in as `target`, so answering through it allocates nothing per request.
 */
export interface Responder<T> {
  /** The caller went away (reset, disconnected, or its deadline answered): nothing is answered. */
  gone(target: T): boolean;
  /** 200 with the codec's content type and `body` (gRPC: `grpc-status: 0` in trailers). */
  ok(target: T, codec: NextIdsCodec, body: string | Buffer): void;
  /**
   * An error answer as the codec encodes it (an answer already begun is cut instead). `dropBody`: the request
   * body is not read to its end, and the transport stops reading it once the answer is out.
   */
  error(target: T, codec: NextIdsCodec, error: ConnectError, dropBody: boolean): void;
}
