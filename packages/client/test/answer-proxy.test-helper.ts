import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import { NextIdsResponseSchema, type NextIdsResponse } from '@idgen/proto';

/** How the proxy changes the answers of NextIds (any other call passes through unchanged). */
export type AnswerMode =
  | { readonly kind: 'pass' }
  /** Rewrites the region bits of every block (a node answering for another region). */
  | { readonly kind: 'region'; readonly region: number; readonly regionShift: bigint; readonly regionBits: number }
  /** Answers every NextIds after the first with the first answer's bytes (a proxy repeating a response). */
  | { readonly kind: 'repeat' };

/** A small HTTP/2 (h2c) proxy in front of one real node, for the client's refusal tests. */
export interface AnswerProxy {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  mode: AnswerMode;
  /** NextIds answers sent, and how many of them were replays of the first. */
  readonly counts: { answers: number; repeated: number };
  close(): Promise<void>;
}

const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'accept-encoding']);

function forwardable(headers: http2.IncomingHttpHeaders): http2.OutgoingHttpHeaders {
  const out: http2.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) if (!k.startsWith(':') && !HOP_HEADERS.has(k)) out[k] = v;
  return out;
}

function collect(stream: NodeJS.ReadableStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
  });
}

/** Starts the proxy on a free loopback port, forwarding to `upstreamUrl` over one HTTP/2 session. */
export async function startAnswerProxy(upstreamUrl: string, mode: AnswerMode = { kind: 'pass' }): Promise<AnswerProxy> {
  const upstream = http2.connect(upstreamUrl);
  upstream.on('error', () => undefined);
  let first: Buffer | undefined;
  const counts = { answers: 0, repeated: 0 };
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
  });
  const proxy: AnswerProxy = {
    url: '',
    mode,
    counts,
    close: async () => {
      upstream.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.destroy();
      await closed;
    },
  };
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined);
    void (async () => {
      const body = await collect(stream);
      const req = upstream.request({
        ':method': headers[':method'],
        ':path': headers[':path'],
        ...forwardable(headers),
      });
      req.on('error', () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
      req.end(body);
      const [responseHeaders, answer] = await Promise.all([
        new Promise<http2.IncomingHttpHeaders>((resolve) => req.once('response', resolve)),
        collect(req),
      ]);
      const isNextIds = String(headers[':path']).endsWith('/NextIds') && Number(responseHeaders[':status']) === 200;
      const out = isNextIds ? rewrite(answer) : answer;
      const { ':status': status, ...rest } = responseHeaders;
      stream.respond({ ':status': status, ...forwardable(rest), 'content-length': out.length });
      stream.end(out);
    })().catch(() => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
  });
  const rewrite = (answer: Buffer): Buffer => {
    counts.answers++;
    const m = proxy.mode;
    if (m.kind === 'repeat') {
      if (first === undefined) first = answer;
      else counts.repeated++;
      return first;
    }
    if (m.kind === 'pass') return answer;
    const response: NextIdsResponse = fromBinary(NextIdsResponseSchema, answer);
    const mask = ((1n << BigInt(m.regionBits)) - 1n) << m.regionShift;
    for (const b of response.blocks) b.first = (b.first & ~mask) | (BigInt(m.region) << m.regionShift);
    return Buffer.from(toBinary(NextIdsResponseSchema, response));
  };
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(proxy, { url: `http://127.0.0.1:${port}` });
}
