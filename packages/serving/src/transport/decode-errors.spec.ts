import { createAsyncIterable, readAllBytes, type UniversalServerResponse } from '@connectrpc/connect/protocol';
import { reclassifyDecodeError } from './decode-errors.js';

const text = async (r: UniversalServerResponse): Promise<string> =>
  r.body === undefined ? '' : new TextDecoder().decode(await readAllBytes(r.body, 1 << 20));
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

function grpcWebTrailerFrame(trailer: string): Uint8Array {
  const payload = bytes(trailer);
  const frame = new Uint8Array(5 + payload.length);
  frame[0] = 0x80;
  new DataView(frame.buffer).setUint32(1, payload.length);
  frame.set(payload, 5);
  return frame;
}

describe('reclassifyDecodeError', () => {
  it('turns a Connect INTERNAL "parse binary" into HTTP 400 invalid_argument', async () => {
    const res: UniversalServerResponse = {
      status: 500,
      header: new Headers({ 'content-type': 'application/json' }),
      body: createAsyncIterable([bytes('{"code":"internal","message":"parse binary: invalid varint"}')]),
    };
    const out = await reclassifyDecodeError(res, 'application/proto');
    expect(out.status).toBe(400);
    expect(JSON.parse(await text(out))).toEqual({ code: 'invalid_argument', message: 'parse binary: invalid varint' });
  });

  it('leaves any other Connect 500 as it was, body intact', async () => {
    const body = '{"code":"internal","message":"serialize binary: oops"}';
    const out = await reclassifyDecodeError(
      { status: 500, body: createAsyncIterable([bytes(body)]) },
      'application/proto',
    );
    expect(out.status).toBe(500);
    expect(await text(out)).toBe(body);
  });

  it('turns a gRPC trailer status 13 "parse binary" into 3, and leaves other statuses', async () => {
    const trailer = new Headers({ 'grpc-status': '13', 'grpc-message': 'parse%20binary%3A%20premature%20EOF' });
    await reclassifyDecodeError({ status: 200, trailer }, 'application/grpc');
    expect(trailer.get('grpc-status')).toBe('3');
    const other = new Headers({ 'grpc-status': '13', 'grpc-message': 'internal%20error' });
    await reclassifyDecodeError({ status: 200, trailer: other }, 'application/grpc');
    expect(other.get('grpc-status')).toBe('13');
  });

  it('rewrites a gRPC-Web trailer frame, re-framed with the right length', async () => {
    const frame = grpcWebTrailerFrame('grpc-status: 13\r\ngrpc-message: parse%20binary%3A%20premature%20EOF\r\n');
    const out = await reclassifyDecodeError(
      { status: 200, body: createAsyncIterable([frame]) },
      'application/grpc-web+proto',
    );
    const all = await readAllBytes(out.body ?? createAsyncIterable([]), 1 << 20);
    expect(all[0]).toBe(0x80);
    const length = new DataView(all.buffer, all.byteOffset).getUint32(1);
    expect(length).toBe(all.length - 5);
    expect(new TextDecoder().decode(all.subarray(5))).toBe(
      'grpc-status: 3\r\ngrpc-message: parse%20binary%3A%20premature%20EOF\r\n',
    );
  });

  it('passes a successful response through untouched', async () => {
    const res: UniversalServerResponse = { status: 200, body: createAsyncIterable([bytes('{}')]) };
    expect(await reclassifyDecodeError(res, 'application/json')).toBe(res);
  });
});
