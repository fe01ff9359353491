// Sends fuzz cases over real connections: node:http with a keep-alive agent (HTTP/1.1), a small pool of
// node:http2 sessions (h2c), or a raw TCP socket. Every exchange has a deadline: no answer in time is a
// `hang`, which the spec reports as a failure (docs/design.md §6: nothing a caller sends may stall a node).
import { readdirSync, readFileSync } from 'node:fs';
import { Agent, request as http1Request } from 'node:http';
import { connect as connectHttp2, constants as h2, type ClientHttp2Session } from 'node:http2';
import { connect as connectTcp } from 'node:net';
import type { WireCase } from './fuzz-wire-cases.test-helper.js';

/** What came back for one case. */
export type WireResult =
  | {
      readonly kind: 'response';
      readonly status: number;
      readonly headers: Readonly<Record<string, string>>;
      readonly trailers: Readonly<Record<string, string>>;
      readonly body: Buffer;
      /** HTTP/2 only: the RST_STREAM code the stream closed with (0 when it ended normally). */
      readonly rstCode: number;
    }
  /** Raw HTTP/2 only: the server sent GOAWAY (`errorCode` per RFC 9113 §7) for a connection error. */
  | { readonly kind: 'goaway'; readonly errorCode: number }
  /** The connection or stream was cut before a complete answer (`reason` says how). */
  | { readonly kind: 'cut'; readonly reason: string }
  | { readonly kind: 'hang'; readonly ms: number };

function flatten(h: Record<string, string | string[] | number | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h))
    if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : String(v);
  return out;
}

/** A sender over all three transports; `close()` ends every connection it opened. */
/**
 * One result per request: the first `settle` wins. With none after `timeoutMs`, the result is `hang` and
 * `onHang` gives up the request.
 */
function settleOnce(resolve: (r: WireResult) => void, timeoutMs: number, onHang?: () => void): (r: WireResult) => void {
  let settled = false;
  const settle = (r: WireResult): void => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    resolve(r);
  };
  const timer = setTimeout(() => {
    settle({ kind: 'hang', ms: timeoutMs });
    onHang?.();
  }, timeoutMs);
  return settle;
}

export interface FuzzSender {
  send(c: WireCase): Promise<WireResult>;
  close(): Promise<void>;
}

/** Creates a sender to `127.0.0.1:port`, giving each exchange `timeoutMs`. */
export function createSender(port: number, timeoutMs: number): FuzzSender {
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });
  const sessions: ClientHttp2Session[] = [];
  const SESSIONS = 2;
  let next = 0;
  const session = (): ClientHttp2Session => {
    const i = next++ % SESSIONS;
    const existing = sessions[i];
    if (existing !== undefined && !existing.closed && !existing.destroyed) return existing;
    const s = connectHttp2(`http://127.0.0.1:${port}`);
    // Session errors surface on the streams; a GOAWAY or reset just means "open a new one next time".
    s.on('error', () => undefined);
    sessions[i] = s;
    return s;
  };

  const sendH1 = (c: WireCase): Promise<WireResult> =>
    new Promise((resolve) => {
      const settle = settleOnce(resolve, timeoutMs, () => req.destroy());
      const headers: Record<string, string | number> = { ...c.headers };
      // Always a length when there is a body: a GET body without one would be read as the next request.
      if (c.body.length > 0 || (c.method !== 'GET' && c.method !== 'HEAD')) headers['content-length'] = c.body.length;
      const req = http1Request({ host: '127.0.0.1', port, method: c.method, path: c.path, headers, agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('end', () =>
          settle({
            kind: 'response',
            status: res.statusCode ?? 0,
            headers: flatten(res.headers),
            trailers: flatten(res.trailers),
            body: Buffer.concat(chunks),
            rstCode: 0,
          }),
        );
        res.on('error', (e) => settle({ kind: 'cut', reason: `response: ${e.message}` }));
        res.on('aborted', () => settle({ kind: 'cut', reason: 'response aborted' }));
      });
      req.on('error', (e: NodeJS.ErrnoException) => settle({ kind: 'cut', reason: e.code ?? e.message }));
      req.end(c.body.length > 0 ? c.body : undefined);
    });

  const sendH2 = (c: WireCase): Promise<WireResult> =>
    new Promise((resolve) => {
      const settle = settleOnce(resolve, timeoutMs, () => stream.close(h2.NGHTTP2_CANCEL));
      const s = session();
      const stream = s.request({ ':method': c.method, ':path': c.path, ...c.headers }, { endStream: false });
      let status = 0;
      let headers: Record<string, string> = {};
      let trailers: Record<string, string> = {};
      let responded = false;
      const chunks: Buffer[] = [];
      stream.on('response', (h) => {
        responded = true;
        status = Number(h[':status']);
        headers = flatten(h as Record<string, string>);
      });
      stream.on('trailers', (t) => {
        trailers = flatten(t as Record<string, string>);
      });
      stream.on('data', (d: Buffer) => chunks.push(d));
      // A stream reset after a complete answer (the server stops reading an oversized body) is still an answer.
      stream.on('error', () => undefined);
      // The answer is complete when the server ends its side, even if it leaves our side open until it cancels
      // the stream at its request deadline (connect-es does so when it refuses a body before reading it all).
      stream.on('end', () => {
        if (responded) settle({ kind: 'response', status, headers, trailers, body: Buffer.concat(chunks), rstCode: 0 });
      });
      stream.on('close', () => {
        if (!responded) settle({ kind: 'cut', reason: `h2 stream closed before a response (rst ${stream.rstCode})` });
        else
          settle({
            kind: 'response',
            status,
            headers,
            trailers,
            body: Buffer.concat(chunks),
            rstCode: stream.rstCode ?? 0,
          });
      });
      stream.end(c.body);
    });

  const sendRaw = (c: WireCase): Promise<WireResult> =>
    new Promise((resolve) => {
      const socket = connectTcp(port, '127.0.0.1', () => socket.write(c.raw ?? new Uint8Array(0)));
      const chunks: Buffer[] = [];
      const settle = settleOnce((r) => {
        socket.destroy();
        resolve(r);
      }, timeoutMs);
      const h2 = Buffer.from(c.raw ?? [])
        .toString('latin1')
        .startsWith('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
      socket.on('data', (d: Buffer) => {
        chunks.push(d);
        // A connection error on HTTP/2 is answered with GOAWAY; node:http2 then leaves the socket to the
        // idle timeout rather than closing it, so the GOAWAY itself is the answer.
        if (h2) {
          const errorCode = goawayIn(Buffer.concat(chunks));
          if (errorCode !== undefined) settle({ kind: 'goaway', errorCode });
        }
      });
      socket.on('error', () => undefined);
      socket.on('close', () => {
        const text = Buffer.concat(chunks).toString('latin1');
        // Skip interim answers (100 Continue): the final status is the first one from 200 up.
        const final = [...text.matchAll(/(?:^|\r\n)HTTP\/1\.[01] (\d{3})/g)]
          .map((m) => Number(m[1]))
          .find((n) => n >= 200);
        if (final === undefined)
          settle({
            kind: 'cut',
            reason:
              text.length === 0
                ? 'closed without an answer'
                : `closed after ${text.length} bytes with no final HTTP/1.x status`,
          });
        else
          settle({
            kind: 'response',
            status: final,
            headers: {},
            trailers: {},
            body: Buffer.from(text, 'latin1'),
            rstCode: 0,
          });
      });
    });

  return {
    send(c) {
      if (c.transport === 'raw') return sendRaw(c);
      return c.transport === 'h2' ? sendH2(c) : sendH1(c);
    },
    async close() {
      agent.destroy();
      await Promise.all(
        sessions.map(
          (s) =>
            new Promise<void>((resolve) => {
              if (s.closed || s.destroyed) return resolve();
              s.close(() => resolve());
              setTimeout(() => {
                s.destroy();
                resolve();
              }, 2_000).unref();
            }),
        ),
      );
    },
  };
}

/** The error code of the first GOAWAY frame among the HTTP/2 frames in `bytes`, if one has arrived whole. */
function goawayIn(bytes: Buffer): number | undefined {
  let at = 0;
  while (at + 9 <= bytes.length) {
    const length = bytes.readUIntBE(at, 3);
    if (bytes[at + 3] === 0x07 && at + 9 + 8 <= bytes.length) return bytes.readUInt32BE(at + 9 + 4);
    at += 9 + length;
  }
  return undefined;
}

/** Resident set size of `pid` in bytes (`VmRSS` in /proc/<pid>/status). */
export function rssBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (m === null) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}

/** Open file descriptors of `pid` (sockets included). */
export function fdCount(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}
