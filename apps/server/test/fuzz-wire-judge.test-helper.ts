// Judges one answer of fuzz-wire.spec.ts: is it a proper protocol answer (a Connect error with a code from
// the allowed set and its prescribed HTTP status, a gRPC status, a plain 404/405/415, …) or a valid
// response whose IDs are right? Returns the outcome label for the counts and the problems, if any.
import { fromBinary, fromJsonString, type DescMessage } from '@bufbuild/protobuf';
import { Code } from '@connectrpc/connect';
import { codeFromString, codeToHttpStatus } from '@connectrpc/connect/protocol-connect';
import { DEFAULT_LAYOUT } from '@idgen/core';
import {
  GetStatusResponseSchema,
  HealthCheckResponseSchema,
  HealthListResponseSchema,
  NextIdsRequestSchema,
  NextIdsResponseSchema,
} from '@idgen/proto';
import { FUZZ_LIMITS, GET_STATUS, HEALTH_CHECK, NEXT_IDS, type WireCase } from './fuzz-wire-cases.test-helper.js';
import type { WireResult } from './fuzz-transport.test-helper.js';

/** What the node is expected to mint as. */
export interface JudgeContext {
  readonly region: number;
  readonly worker: number;
  /** Wall clock when the run started: no ID may carry an earlier timestamp than this minus a margin. */
  readonly startedMs: number;
}

/** The verdict on one answer. */
export interface Verdict {
  /** e.g. `ok`, `connect:invalid_argument`, `grpc:3`, `http:404`, `cut`. */
  readonly outcome: string;
  readonly problems: string[];
  /** The NextIds blocks served, for the run-wide uniqueness check. */
  readonly blocks: { first: bigint; count: number }[];
}

/**
 * Connect error codes a caller's request may earn here (docs/design.md §6): its own mistakes, a method we do not
 * serve, a limit, a node that may not mint now, its deadline. `not_found` only for an unknown health service.
 */
const ALLOWED_CONNECT_CODES = new Set<Code>([
  Code.InvalidArgument,
  Code.Unimplemented,
  Code.ResourceExhausted,
  Code.Unavailable,
  Code.DeadlineExceeded,
]);
/** Plain HTTP refusals with no Connect body: unknown path, method, media type; node:http's own 400/408/413/414/431. */
const ALLOWED_PLAIN_STATUSES = new Set([400, 404, 405, 408, 413, 414, 415, 431]);
/** A raw connection may also get 505 for an HTTP version node:http does not speak. */
const ALLOWED_RAW_STATUSES = new Set([200, 400, 404, 405, 408, 413, 414, 415, 429, 431, 505]);

const STACK = /\n\s+at \S|\bat [^\s()]+ \([^)]*:\d+:\d+\)|node:internal|\/dist\/[\w-]+\.js:\d+/;

type Protocol = 'connect' | 'grpc' | 'grpc-web';

function protocolOf(c: WireCase): Protocol {
  const type = (c.headers['content-type'] ?? '').toLowerCase();
  if (type.startsWith('application/grpc-web')) return 'grpc-web';
  if (type.startsWith('application/grpc')) return 'grpc';
  return 'connect';
}

function expectedCount(c: WireCase): number | undefined {
  if (c.message === undefined) return undefined;
  try {
    return c.message.format === 'json'
      ? // protobuf-es's defaults, as the server reads JSON: a key NextIdsRequest does not have is refused.
        fromJsonString(NextIdsRequestSchema, Buffer.from(c.message.bytes).toString('utf8')).count
      : fromBinary(NextIdsRequestSchema, c.message.bytes).count;
  } catch {
    return undefined;
  }
}

/** The cases where the server may legitimately cut the connection or stream instead of answering. */
function mayBeCut(c: WireCase): boolean {
  if (c.transport === 'raw' || c.category.startsWith('oversized/')) return true;
  // Header limits: node:http2 resets a stream above 64 header pairs or 16 KiB of headers.
  const headerBytes = Object.entries(c.headers).reduce((n, [k, v]) => n + k.length + v.length + 32, c.path.length);
  return Object.keys(c.headers).length > 60 || headerBytes > 15 * 1024;
}

/** Splits a gRPC / gRPC-Web body into frames; undefined when the framing is broken. */
function frames(body: Buffer): { flags: number; payload: Buffer }[] | undefined {
  const out: { flags: number; payload: Buffer }[] = [];
  let at = 0;
  while (at < body.length) {
    if (at + 5 > body.length) return undefined;
    const length = body.readUInt32BE(at + 1);
    if (at + 5 + length > body.length) return undefined;
    out.push({ flags: body[at] ?? 0, payload: body.subarray(at + 5, at + 5 + length) });
    at += 5 + length;
  }
  return out;
}

function decodeMessage<T extends DescMessage>(
  schema: T,
  contentType: string,
  bytes: Buffer,
): ReturnType<typeof fromBinary<T>> {
  return contentType.includes('json') ? fromJsonString(schema, bytes.toString('utf8')) : fromBinary(schema, bytes);
}

function checkSuccess(
  c: WireCase,
  contentType: string,
  payload: Buffer,
  ctx: JudgeContext,
  problems: string[],
): { first: bigint; count: number }[] {
  const path = c.path.split('?')[0];
  try {
    if (path === GET_STATUS) {
      const s = decodeMessage(GetStatusResponseSchema, contentType, payload);
      if (s.region !== ctx.region) problems.push(`GetStatus region ${s.region}, expected ${ctx.region}`);
      return [];
    }
    if (path === HEALTH_CHECK) {
      decodeMessage(HealthCheckResponseSchema, contentType, payload);
      return [];
    }
    if (path === '/grpc.health.v1.Health/List') {
      decodeMessage(HealthListResponseSchema, contentType, payload);
      return [];
    }
    if (path !== NEXT_IDS) {
      problems.push(`a success on ${path}, which serves nothing`);
      return [];
    }
    const res = decodeMessage(NextIdsResponseSchema, contentType, payload);
    const blocks = res.blocks.map((b) => ({ first: b.first, count: b.count }));
    let total = 0;
    let previousLast = -1n;
    const now = Date.now();
    for (const b of blocks) {
      total += b.count;
      if (b.count < 1) problems.push(`a block of ${b.count} IDs`);
      if (b.first <= previousLast)
        problems.push(`block ${b.first} does not follow the previous block's last ID ${previousLast}`);
      previousLast = b.first + BigInt(b.count) - 1n;
      for (const id of [b.first, previousLast]) {
        const f = DEFAULT_LAYOUT.decompose(id);
        if (f.region !== ctx.region || f.worker !== ctx.worker)
          problems.push(`ID ${id} has region ${f.region} worker ${f.worker}, expected ${ctx.region}/${ctx.worker}`);
        const ms = DEFAULT_LAYOUT.unixMsOf(id);
        // Not a timing assertion: an ID's timestamp must come from this run's wall clock (docs/design.md §1), whatever the speed.
        if (ms < ctx.startedMs - 5_000 || ms > now + 5_000)
          problems.push(`ID ${id} carries ${new Date(ms).toISOString()}, outside this run`);
      }
    }
    const expected = expectedCount(c);
    if (total < 1 || total > FUZZ_LIMITS.maxCount)
      problems.push(`${total} IDs served, outside 1..${FUZZ_LIMITS.maxCount}`);
    if (expected !== undefined && total !== expected) problems.push(`${total} IDs served for a request of ${expected}`);
    if (expected === undefined && c.message !== undefined)
      problems.push('served IDs for a message that does not decode');
    return blocks;
  } catch (e) {
    problems.push(`a success whose body does not decode: ${e instanceof Error ? e.message : String(e)}`);
    return [];
  }
}

function grpcStatusName(status: number): string {
  return `${status} ${(status === 0 ? 'Ok' : (Code[status] ?? 'Undefined')).replace(/[A-Z]/g, (m, i: number) => (i === 0 ? '' : '_') + m.toLowerCase())}`;
}

/** Judges `r`, the answer to `c`. */
export function judge(c: WireCase, r: WireResult, ctx: JudgeContext): Verdict {
  const problems: string[] = [];
  if (r.kind === 'hang') return { outcome: 'hang', problems: [`no answer within ${r.ms} ms`], blocks: [] };
  if (r.kind === 'goaway') {
    if (c.transport !== 'raw') problems.push(`GOAWAY ${r.errorCode} on a ${c.transport} request`);
    return { outcome: `raw:h2-goaway:${r.errorCode}`, problems, blocks: [] };
  }
  if (r.kind === 'cut') {
    if (!mayBeCut(c)) problems.push(`connection cut without an answer (${r.reason})`);
    if (c.mustServe !== undefined) problems.push(`a valid request for ${c.mustServe} IDs was not served (${r.reason})`);
    return { outcome: 'cut', problems, blocks: [] };
  }
  const everything = r.body.toString('latin1') + JSON.stringify(r.headers) + JSON.stringify(r.trailers);
  if (STACK.test(everything)) problems.push(`a stack trace or source path in the answer: ${everything.slice(0, 300)}`);

  if (c.transport === 'raw') {
    if (!ALLOWED_RAW_STATUSES.has(r.status)) problems.push(`HTTP ${r.status} on a raw request`);
    return { outcome: `raw:http:${r.status}`, problems, blocks: [] };
  }

  const path = c.path.split('?')[0] ?? '';
  const contentType = r.headers['content-type'] ?? '';
  let blocks: { first: bigint; count: number }[] = [];
  let outcome: string;
  const protocol = protocolOf(c);

  if (path === '/healthz' || path === '/readyz') {
    outcome = `http:${r.status}`;
    // Standalone with --time-source none is ready at once and stays ready.
    if (c.method === 'GET' || c.method === 'HEAD') {
      if (r.status !== 200) problems.push(`${c.method} ${path}: ${r.status}`);
    } else if (r.status !== 405) problems.push(`${c.method} ${path}: ${r.status}, expected 405`);
  } else if (
    (protocol === 'grpc' || protocol === 'grpc-web') &&
    r.status === 200 &&
    contentType.startsWith('application/grpc')
  ) {
    const parsed = frames(r.body);
    let status: string | undefined = r.trailers['grpc-status'] ?? r.headers['grpc-status'];
    let message = r.trailers['grpc-message'] ?? r.headers['grpc-message'] ?? '';
    const data = (parsed ?? []).filter((f) => (f.flags & 0x80) === 0);
    if (parsed === undefined)
      problems.push(`a ${protocol} body with broken framing: ${r.body.subarray(0, 40).toString('hex')}`);
    if (protocol === 'grpc-web') {
      const trailer = (parsed ?? []).find((f) => (f.flags & 0x80) !== 0)?.payload.toString('latin1') ?? '';
      status = status ?? /^grpc-status:\s*(\d+)/im.exec(trailer)?.[1];
      message = message || (/^grpc-message:\s*(.*?)\s*$/im.exec(trailer)?.[1] ?? '');
    }
    const code = Number(status);
    outcome = `${protocol}:${status === undefined ? 'no-status' : grpcStatusName(code)}`;
    if (status === undefined || !/^\d+$/.test(status)) {
      problems.push(`a ${protocol} answer without grpc-status`);
    } else if (code === 0) {
      if (data.length !== 1) problems.push(`grpc-status 0 with ${data.length} messages`);
      else blocks = checkSuccess(c, contentType, data[0]?.payload ?? Buffer.alloc(0), ctx, problems);
    } else {
      let text = message;
      try {
        text = decodeURIComponent(message);
      } catch {
        // left as sent
      }
      // The gRPC protocol prescribes INTERNAL for a compressed message with no (or identity) grpc-encoding.
      const compressedWithoutEncoding =
        code === Code.Internal &&
        /compressed (envelope|message)/.test(text) &&
        (c.body[0] ?? 0) & 1 &&
        ['identity', undefined].includes(c.headers['grpc-encoding']);
      const notFound = code === Code.NotFound && path === HEALTH_CHECK;
      if (!ALLOWED_CONNECT_CODES.has(code) && !compressedWithoutEncoding && !notFound)
        problems.push(`grpc-status ${grpcStatusName(code)}: ${text}`);
      if (compressedWithoutEncoding) outcome += ' (compressed flag, no grpc-encoding)';
    }
  } else if (r.status === 200) {
    outcome = 'connect:ok';
    if (c.method !== 'POST') problems.push(`${c.method} ${path} answered 200`);
    else if (protocol !== 'connect')
      problems.push(`HTTP 200 with content-type ${contentType} for a ${protocol} request`);
    else blocks = checkSuccess(c, contentType, r.body, ctx, problems);
  } else if (contentType.startsWith('application/json') && r.body.length > 0 && protocol === 'connect') {
    let error: { code?: unknown; message?: unknown } | undefined;
    try {
      error = JSON.parse(r.body.toString('utf8')) as { code?: unknown; message?: unknown };
    } catch {
      problems.push(`HTTP ${r.status} with a JSON content type and a body that is not JSON`);
    }
    const codeText = typeof error?.code === 'string' ? error.code : 'none';
    outcome = `connect:${codeText}`;
    const code = codeFromString(codeText);
    const notFound = code === Code.NotFound && path === HEALTH_CHECK;
    if (code === undefined || (!ALLOWED_CONNECT_CODES.has(code) && !notFound))
      problems.push(`Connect error code ${codeText} (HTTP ${r.status}): ${String(error?.message)}`);
    else if (codeToHttpStatus(code) !== r.status)
      problems.push(`Connect error ${codeText} with HTTP ${r.status}, the protocol says ${codeToHttpStatus(code)}`);
  } else {
    outcome = `http:${r.status}`;
    if (!ALLOWED_PLAIN_STATUSES.has(r.status))
      problems.push(`HTTP ${r.status} (${contentType}) ${r.body.subarray(0, 200).toString('latin1')}`);
  }
  if (c.mustServe !== undefined && blocks.reduce((n, b) => n + b.count, 0) !== c.mustServe) {
    problems.push(`a valid request for ${c.mustServe} IDs was answered ${outcome}`);
  }
  return { outcome, problems, blocks };
}
