import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import fc from 'fast-check';
import { NextIdsRequestSchema } from '@idgen/proto';
import { countOf } from './fast-path.js';

describe('countOf: NextIdsRequest.count without the generated decoder', () => {
  const decoded = (bytes: Uint8Array): number | 'error' => {
    try {
      return fromBinary(NextIdsRequestSchema, bytes).count;
    } catch {
      return 'error';
    }
  };

  it('reads what the generated encoder writes for every count, like fromBinary', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffff_ffff }), (count) => {
        const bytes = toBinary(NextIdsRequestSchema, create(NextIdsRequestSchema, { count }));
        expect(countOf(bytes)).toBe(count);
      }),
      { numRuns: 2000 },
    );
    expect(countOf(new Uint8Array([]))).toBe(0);
    expect(countOf(new Uint8Array([0x08, 0x01]))).toBe(1);
    expect(countOf(new Uint8Array([0x08, 0xff, 0xff, 0xff, 0xff, 0x0f]))).toBe(0xffff_ffff);
  });

  it('never disagrees with fromBinary on any bytes: the same count, or no answer (the generated decoder then reads them)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 8 }),
          fc.uint8Array({ maxLength: 7 }).map((a) => Uint8Array.from([0x08, ...a])),
        ),
        (bytes) => {
          const quick = countOf(bytes);
          if (quick !== undefined) expect(decoded(bytes)).toBe(quick);
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it('leaves the unusual to fromBinary: unknown fields, a repeated field, over-long or truncated varints', () => {
    for (const bytes of [
      [0x08, 0x01, 0x10, 0x02], // an unknown field after count
      [0x08, 0x01, 0x08, 0x02], // count twice (the last wins in fromBinary)
      [0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], // a varint longer than uint32's 5 bytes
      [0x08, 0xff, 0xff, 0xff, 0xff, 0x1f], // 5 bytes, above 2^32 - 1
      [0x08, 0x80], // truncated
      [0x08], // no value
      [0x0a, 0x00], // field 1 with the wrong wire type
    ]) {
      expect(countOf(Uint8Array.from(bytes))).toBeUndefined();
    }
  });
});
