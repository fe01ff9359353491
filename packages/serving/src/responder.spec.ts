import { Code, ConnectError } from '@connectrpc/connect';
import { createNextIdsFastPath } from './fast-path.js';
import { CONNECT_JSON, GRPC, tooLarge, type NextIdsCodec } from './nextids-codec.js';
import type { Responder } from './transport/contracts.js';

// The fast path alone, through a stand-in Responder that records what it was asked to write (each transport's
// own Responder and reader are covered on the wire by http.spec.ts and malformed-requests.spec.ts).
interface Target {
  gone: boolean;
  ok: [NextIdsCodec, string | Buffer][];
  error: [NextIdsCodec, Code, string, boolean][];
}
const target = (): Target => ({ gone: false, ok: [], error: [] });
const RECORDING: Responder<Target> = {
  gone: (t) => t.gone,
  ok: (t, codec, body) => void t.ok.push([codec, body]),
  error: (t, codec, e, dropBody) => void t.error.push([codec, e.code, e.rawMessage, dropBody]),
};

describe('the NextIds fast path through a Responder', () => {
  const codes: (Code | undefined)[] = [];
  const owners: unknown[] = [];
  let later: ((blocks: { first: bigint; count: number }[]) => void) | undefined;
  const fast = createNextIdsFastPath({
    nextIds: (count, owner) => {
      owners.push(owner);
      if (count === 7) throw new ConnectError('fenced', Code.Unavailable);
      if (count === 9) return new Promise((resolve) => (later = resolve));
      return [{ first: 42n, count }];
    },
    maxBodyBytes: 16,
    record: (code) => codes.push(code),
  });
  const owner = {};
  /** What a transport's reader does with a complete body: mint, then the one answer through its Responder. */
  const serve = (t: Target, codec: NextIdsCodec, body: Buffer): void =>
    fast.mint(
      codec,
      body,
      owner,
      () => t.gone,
      (result) => fast.answer(RECORDING, t, codec, result, 1n),
    );

  it('takes POST with a codec it has, and leaves the rest to connect-es', () => {
    expect(fast.codecFor('POST', { 'content-type': 'application/json' }, false)).toBe(CONNECT_JSON);
    expect(fast.codecFor('GET', { 'content-type': 'application/json' }, false)).toBeUndefined();
    expect(fast.codecFor('POST', { 'content-type': 'application/grpc-web' }, true)).toBeUndefined();
    expect([fast.path, fast.maxBodyBytes]).toEqual(['/idgen.v1.IdGenerator/NextIds', 16]);
  });

  it('answers once through the responder: the encoded blocks, counted ok, minted for the connection', () => {
    const t = target();
    serve(t, CONNECT_JSON, Buffer.from('{"count":2}'));
    expect(t.ok).toEqual([[CONNECT_JSON, '{"blocks":[{"first":"42","count":2}]}']]);
    expect([t.error.length, codes.pop(), owners.pop()]).toEqual([0, undefined, owner]);
  });

  it("answers the guard's error, and a body the caller got wrong, as errors through the responder", () => {
    const t = target();
    serve(t, GRPC, Buffer.from([0, 0, 0, 0, 2, 0x08, 7]));
    serve(t, CONNECT_JSON, Buffer.from('{"count":'));
    expect(t.error.map(([codec, code, , dropBody]) => [codec, code, dropBody])).toEqual([
      [GRPC, Code.Unavailable, false],
      [CONNECT_JSON, Code.InvalidArgument, false],
    ]);
    expect([t.ok.length, codes.splice(0)]).toEqual([0, [Code.Unavailable, Code.InvalidArgument]]);
  });

  it('answers IDs that waited for their millisecond later, and nothing to a caller gone meanwhile', async () => {
    const waiting = target();
    serve(waiting, CONNECT_JSON, Buffer.from('{"count":9}'));
    expect(waiting.ok).toEqual([]);
    waiting.gone = true;
    later?.([{ first: 1n, count: 9 }]);
    await Promise.resolve();
    expect([waiting.ok.length, waiting.error.length, codes.length]).toEqual([0, 0, 0]);

    const kept = target();
    serve(kept, CONNECT_JSON, Buffer.from('{"count":9}'));
    later?.([{ first: 1n, count: 9 }]);
    await Promise.resolve();
    expect(kept.ok).toEqual([[CONNECT_JSON, '{"blocks":[{"first":"1","count":9}]}']]);
  });

  it('refuses a body over the limit through the responder, counted, the body left unread', () => {
    const t = target();
    fast.refuse(RECORDING, t, GRPC, tooLarge(17, 16), 1n, true);
    expect(t.error).toEqual([
      [GRPC, Code.ResourceExhausted, 'message size 17 is larger than configured readMaxBytes 16', true],
    ]);
    expect(codes.pop()).toBe(Code.ResourceExhausted);
  });
});
