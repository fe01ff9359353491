import { DEFAULT_LAYOUT, createIdForms, decodeId } from '@idgen/core';
import { isIdClientError, isIdsUnavailableError } from './errors.js';
import type { IdClient } from './id-client.js';
import { createTestIdClient } from './testing.js';

describe('createTestIdClient', () => {
  it('hands out increasing IDs of the chosen region and worker, the same for the same options', async () => {
    const a = createTestIdClient({ region: 2, worker: 5 });
    const ids = [await a.nextId(), ...(await a.nextIds(3)), BigInt(await a.nextIdString()), a.tryNextId() as bigint];
    expect(ids.map((id) => decodeId(id))).toEqual(
      [0, 1, 2, 3, 4, 5].map((sequence) => ({ timestampMs: 0, region: 2, worker: 5, sequence })),
    );
    expect(a.issued).toEqual(ids);
    const b = createTestIdClient({ region: 2, worker: 5 });
    expect(await b.nextIds(6)).toEqual(ids);
  });

  it('hands out IDs in a form as the real client does, and refuses keyed without a key', async () => {
    const key = '000102030405060708090a0b0c0d0e0f';
    const t = createTestIdClient({ region: 2, worker: 5, keyedFormKey: key });
    const forms = createIdForms({ key });
    const base32: string = await t.nextId({ form: 'base32' });
    const keyed: bigint[] = await t.nextIds(2, { form: 'keyed' });
    expect([forms.parse(base32, 'base32'), ...keyed.map((k) => forms.parse(k, 'keyed'))]).toEqual(t.issued);
    await expect(createTestIdClient().nextId({ form: 'keyed' })).rejects.toThrow(/keyedFormKey/);
  });

  it('carries into the next millisecond when the sequence is full, as a node does', async () => {
    const c = createTestIdClient({ startTimestampMs: 7 });
    const ids = await c.nextIds(DEFAULT_LAYOUT.maxSequence + 2);
    for (let i = 1; i < ids.length; i++) expect(ids[i] as bigint).toBeGreaterThan(ids[i - 1] as bigint);
    expect(decodeId(ids.at(-1) as bigint)).toEqual({ timestampMs: 8, region: 0, worker: 0, sequence: 0 });
  });

  it('fails on demand, with the errors of the real client', async () => {
    const c = createTestIdClient();
    c.failNext(2);
    expect(isIdsUnavailableError(await c.nextId().catch((e: unknown) => e))).toBe(true);
    expect(c.tryNextId()).toBeUndefined();
    expect(typeof (await c.nextId())).toBe('bigint');
    c.failNext(1, 'rejected');
    const rejected = await c.nextIds(2).catch((e: unknown) => e);
    expect(isIdClientError(rejected) && rejected.code).toBe('rejected');
    c.setUnavailable(true);
    expect(isIdsUnavailableError(await c.nextIdString().catch((e: unknown) => e))).toBe(true);
    expect(isIdsUnavailableError(await c.nextIds(1).catch((e: unknown) => e))).toBe(true);
    c.setUnavailable(false);
    await expect(c.nextId()).resolves.toEqual(expect.any(BigInt));
    expect(c.stats()).toMatchObject({ hits: 2, misses: 5 });
  });

  it('has the client surface: an IdClient, closed like one, aborted like one, ranges checked', async () => {
    const c: IdClient = createTestIdClient();
    const signal = AbortSignal.abort(new Error('gone'));
    await expect(c.nextId({ signal })).rejects.toThrow('gone');
    await expect(c.nextIds(0)).rejects.toThrow(RangeError);
    await c.close();
    const closed = await c.nextId().catch((e: unknown) => e);
    expect(isIdClientError(closed) && closed.code).toBe('closed');
    expect(c.tryNextId()).toBeUndefined();
    expect(() => createTestIdClient({ region: 8 })).toThrow(/region must be an integer from 0 to 7/);
  });
});
