import { create, fromBinary, fromJsonString, toBinary, toJsonString } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { errorFromJsonBytes } from '@connectrpc/connect/protocol-connect';
import fc from 'fast-check';
import { NextIdsRequestSchema, NextIdsResponseSchema } from '@idgen/proto';
import { CONNECT_JSON, CONNECT_PROTO, GRPC, codecFor, idsIn, tooLarge } from './nextids-codec.js';

// The fast path's wire formats as pure functions, against the generated code (docs/design.md §6).
const block = fc.record({
  first: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
  count: fc.integer({ min: 1, max: 65_536 }),
});
const blocks = fc.array(block, { minLength: 1, maxLength: 4 });
const asMessage = (bs: readonly { first: bigint; count: number }[]) =>
  create(NextIdsResponseSchema, { blocks: bs.map((b) => ({ first: b.first, count: b.count })) });

describe('the NextIds codecs', () => {
  it('encode the answer as the generated decoders read it: JSON, binary, one gRPC frame', () => {
    fc.assert(
      fc.property(blocks, (bs) => {
        const expected = asMessage(bs);
        const json = CONNECT_JSON.encodeBlocks(bs) as string;
        expect(fromJsonString(NextIdsResponseSchema, json)).toEqual(expected);
        const binary = CONNECT_PROTO.encodeBlocks(bs) as Buffer;
        expect(fromBinary(NextIdsResponseSchema, binary)).toEqual(expected);
        const frame = GRPC.encodeBlocks(bs) as Buffer;
        expect([frame[0], frame.readUInt32BE(1)]).toEqual([0, frame.length - 5]);
        expect(fromBinary(NextIdsResponseSchema, frame.subarray(5))).toEqual(expected);
        expect(idsIn(bs)).toBe(bs.reduce((n, b) => n + b.count, 0));
      }),
      { numRuns: 300 },
    );
  });

  it('decode the count the generated encoders write, in each protocol', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffff_ffff }), (count) => {
        const message = create(NextIdsRequestSchema, { count });
        const binary = Buffer.from(toBinary(NextIdsRequestSchema, message));
        const frame = Buffer.alloc(5 + binary.length);
        frame.writeUInt32BE(binary.length, 1);
        binary.copy(frame, 5);
        expect(CONNECT_JSON.decodeCount(Buffer.from(toJsonString(NextIdsRequestSchema, message)))).toBe(count);
        expect(CONNECT_PROTO.decodeCount(binary)).toBe(count);
        expect(GRPC.decodeCount(frame)).toBe(count);
      }),
      { numRuns: 300 },
    );
  });

  it("refuse a body the caller got wrong with the caller's code, not ours", () => {
    const codeOf = (f: () => unknown): Code | undefined => {
      try {
        f();
        return undefined;
      } catch (e) {
        return ConnectError.from(e).code;
      }
    };
    expect(codeOf(() => CONNECT_JSON.decodeCount(Buffer.from('{"count":')))).toBe(Code.InvalidArgument);
    expect(codeOf(() => CONNECT_PROTO.decodeCount(Buffer.from([0x08])))).toBe(Code.InvalidArgument);
    expect(codeOf(() => GRPC.decodeCount(Buffer.from([0, 0, 0])))).toBe(Code.InvalidArgument);
    expect(codeOf(() => GRPC.decodeCount(Buffer.from([0, 0, 0, 0, 3, 0x08, 0x01])))).toBe(Code.InvalidArgument);
    expect(codeOf(() => GRPC.decodeCount(Buffer.from([1, 0, 0, 0, 0])))).toBe(Code.Internal); // compressed flag
  });

  it('encode errors as connect-es does: a Connect JSON error body and status, gRPC trailers-only fields', () => {
    const error = new ConnectError('fenced: clock', Code.Unavailable, { 'x-idgen-fence-reason': 'clock' });
    const connect = CONNECT_JSON.encodeError(error);
    expect(connect.status).toBe(503);
    expect(connect.headers).toEqual({
      'x-idgen-fence-reason': 'clock',
      'content-type': 'application/json',
      'content-length': connect.body?.length,
    });
    const back = errorFromJsonBytes(connect.body as Buffer, undefined, new ConnectError('unparsed', Code.Unknown));
    expect([back.code, back.rawMessage]).toEqual([Code.Unavailable, 'fenced: clock']);
    expect(CONNECT_PROTO.encodeError(error)).toEqual(connect);
    expect(GRPC.encodeError(error)).toEqual({
      status: 200,
      headers: {
        'x-idgen-fence-reason': 'clock',
        'content-type': 'application/grpc+proto',
        'grpc-status': String(Code.Unavailable),
        'grpc-message': 'fenced%3A%20clock',
      },
      body: undefined,
    });
    expect(tooLarge(70_000, 65_536).rawMessage).toBe('message size 70000 is larger than configured readMaxBytes 65536');
    expect(tooLarge(undefined, 10).code).toBe(Code.ResourceExhausted);
  });

  it('are chosen by content type and encoding; gRPC only on HTTP/2, gRPC-Web and compressed bodies never', () => {
    expect(codecFor({ 'content-type': 'application/json' }, false)).toBe(CONNECT_JSON);
    expect(codecFor({ 'content-type': 'application/json; charset=UTF-8' }, true)).toBe(CONNECT_JSON);
    expect(codecFor({ 'content-type': 'application/proto', 'content-encoding': 'identity' }, false)).toBe(
      CONNECT_PROTO,
    );
    expect(codecFor({ 'content-type': 'application/grpc' }, true)).toBe(GRPC);
    expect(codecFor({ 'content-type': 'application/grpc+proto', 'grpc-encoding': 'identity' }, true)).toBe(GRPC);
    expect(codecFor({ 'content-type': 'application/grpc' }, false)).toBeUndefined();
    expect(codecFor({ 'content-type': 'application/grpc', 'grpc-encoding': 'gzip' }, true)).toBeUndefined();
    expect(codecFor({ 'content-type': 'application/grpc-web+proto' }, true)).toBeUndefined();
    expect(codecFor({ 'content-type': 'application/proto', 'content-encoding': 'gzip' }, true)).toBeUndefined();
    expect(codecFor({ 'content-type': 'application/json+x' }, true)).toBeUndefined();
    expect(codecFor({}, true)).toBeUndefined();
  });
});
