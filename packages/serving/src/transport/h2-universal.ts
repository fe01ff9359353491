import { Code, ConnectError } from '@connectrpc/connect';
import type { UniversalServerRequest, UniversalServerResponse } from '@connectrpc/connect/protocol';
import { ErrorCode, type H2Stream } from '@idgen/h2';
import { TRANSPORT_DEFAULTS } from './transport-settings.js';

/**
 * A request body read from an @idgen/h2 stream as the async iterable connect-es reads. Chunks wait here until
 * read; more than `maxQueued` bytes waiting (a caller sending faster than connect-es reads, past any body the
 * server accepts) resets the stream rather than buffer without bound.
 */
class BodyQueue implements AsyncIterable<Uint8Array> {
  private readonly chunks: Buffer[] = [];
  private queued = 0;
  private ended = false;
  private failed: Error | undefined;
  private wake: (() => void) | undefined;

  constructor(
    stream: H2Stream,
    private readonly maxQueued: number,
  ) {
    stream.ondata = (chunk) => {
      this.queued += chunk.length;
      if (this.queued > this.maxQueued) {
        stream.reset(ErrorCode.ENHANCE_YOUR_CALM);
        return;
      }
      this.chunks.push(Buffer.from(chunk)); // the chunk is a view of the connection's input
      this.notify();
    };
    stream.onend = () => {
      this.ended = true;
      this.notify();
    };
  }

  fail(e: Error): void {
    this.failed = e;
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const chunk = this.chunks.shift();
      if (chunk !== undefined) {
        this.queued -= chunk.length;
        yield chunk;
        continue;
      }
      if (this.failed !== undefined) throw this.failed;
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}

/** A universal request (what connect-es's handlers take) for an @idgen/h2 stream, and how to end it. */
export function universalRequestFromH2Stream(
  stream: H2Stream,
  maxBodyBytes: number,
): { request: UniversalServerRequest; abort(reason: ConnectError): void } {
  const controller = new AbortController();
  const body = new BodyQueue(stream, maxBodyBytes + TRANSPORT_DEFAULTS.bodySlackBytes);
  let header = new Headers();
  try {
    const fields = stream.headers;
    for (const name in fields) header.set(name, fields[name] ?? '');
  } catch {
    // A field the WHATWG Headers refuses (it throws on a name that is not a token, a value with NUL, CR or LF).
    // @idgen/h2 resets such a request before any handler sees it (RFC 9113 §8.2.1), so this is defence in depth:
    // this runs inside the connection's read loop, where a throw would end every stream with GOAWAY
    // INTERNAL_ERROR. The request is malformed (§8.1.1): this one stream is reset with PROTOCOL_ERROR instead, once
    // the caller has set its `onclose` (a microtask later), so the call is aborted and accounted as for any reset;
    // connect-es meanwhile sees an aborted call and nothing is answered.
    header = new Headers();
    const malformed = new ConnectError('malformed request header field', Code.InvalidArgument);
    body.fail(malformed);
    controller.abort(malformed);
    queueMicrotask(() => stream.reset(ErrorCode.PROTOCOL_ERROR));
  }
  const authority = stream.authority === '' ? 'localhost' : stream.authority;
  const request: UniversalServerRequest = {
    httpVersion: '2.0',
    method: stream.method,
    url: `${stream.scheme}://${authority}${stream.path}`,
    header,
    body,
    signal: controller.signal,
  };
  return {
    request,
    abort(reason) {
      body.fail(reason);
      controller.abort(reason);
    },
  };
}

function headersToRecord(headers: Headers | undefined): Record<string, string> {
  const record: Record<string, string> = {};
  headers?.forEach((value, name) => {
    record[name] = value;
  });
  return record;
}

/** Writes a universal response on an @idgen/h2 stream: headers, the body as flow control lets it go, trailers. */
export async function universalResponseToH2Stream(response: UniversalServerResponse, stream: H2Stream): Promise<void> {
  if (stream.isClosed) throw new ConnectError('the caller went away', Code.Aborted);
  stream.respond(response.status, headersToRecord(response.header));
  if (response.body !== undefined) {
    for await (const chunk of response.body) {
      if (stream.isClosed) throw new ConnectError('the caller went away', Code.Aborted);
      stream.write(chunk);
    }
  }
  stream.end(undefined, response.trailer === undefined ? undefined : headersToRecord(response.trailer));
}

/** The ConnectError an RST_STREAM code stands for when a caller resets a stream (as connect-node reads them). */
export function connectErrorFromResetCode(code: number): ConnectError {
  switch (code) {
    case ErrorCode.REFUSED_STREAM:
      return new ConnectError('stream refused', Code.Unavailable);
    case ErrorCode.ENHANCE_YOUR_CALM:
      return new ConnectError('enhance your calm', Code.ResourceExhausted);
    default:
      return new ConnectError(`stream reset (code ${code})`, Code.Aborted);
  }
}
