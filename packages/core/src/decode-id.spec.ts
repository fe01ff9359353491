import { DEFAULT_LAYOUT, createLayout, decodeId, isInvalidIdError, MAX_ID } from './index.js';

describe('decodeId', () => {
  it.each([
    { id: 104148763141017605n, fields: { timestampMs: 24831000123, region: 2, worker: 17, sequence: 5 } },
    { id: 0n, fields: { timestampMs: 0, region: 0, worker: 0, sequence: 0 } },
    { id: MAX_ID, fields: { timestampMs: 2 ** 41 - 1, region: 7, worker: 127, sequence: 4095 } },
    { id: '104148763141017605', fields: { timestampMs: 24831000123, region: 2, worker: 17, sequence: 5 } },
  ])('decodes $id under the default layout', ({ id, fields }) => {
    expect(decodeId(id)).toEqual(fields);
    expect(decodeId(id)).toEqual(DEFAULT_LAYOUT.decompose(BigInt(id)));
  });

  it('decodes under a given layout', () => {
    const layout = createLayout({ regionBits: 2, workerBits: 9, sequenceBits: 10, timestampBits: 42 });
    const id = layout.compose({ timestampMs: 5, region: 3, worker: 511, sequence: 1023 });
    expect(decodeId(id, layout)).toEqual({ timestampMs: 5, region: 3, worker: 511, sequence: 1023 });
  });

  it.each([[-1n], [MAX_ID + 1n]])('refuses %p with the range in the message', (id) => {
    expect(() => decodeId(id)).toThrow(/from 0 to 9223372036854775807/);
  });

  it.each([[''], ['0x10'], ['-5'], ['9223372036854775808']])('refuses the text %p as an InvalidIdError', (text) => {
    let caught: unknown;
    try {
      decodeId(text);
    } catch (e) {
      caught = e;
    }
    expect(isInvalidIdError(caught)).toBe(true);
  });
});
