import { DEFAULT_LAYOUT, createIdForms } from '@idgen/core';
import { QUICK_LEASE_SETTINGS, bindRegion, cleanupAll, startEtcd, type EtcdServer } from '@idgen/testing';
import { createEmbeddedIdSource, type EmbeddedIdSource } from '../src/index.js';

// The embedded source hands its IDs out in each form of docs/design.md §1 "Forms", against a real etcd.
jest.setTimeout(120_000);

const key = '000102030405060708090a0b0c0d0e0f';
const forms = createIdForms({ key });
let etcd: EtcdServer;
let source: EmbeddedIdSource;

beforeAll(async () => {
  etcd = await startEtcd();
  const prefix = `/idgen-embedded-forms/${process.pid}`;
  await bindRegion(etcd, 2, prefix);
  source = createEmbeddedIdSource({
    etcd: { endpoints: [etcd.clientUrl], prefix },
    region: 2,
    timeSource: 'none',
    keyedFormKey: key,
    ...QUICK_LEASE_SETTINGS,
  });
  await source.ready();
});

afterAll(async () => {
  await source?.close();
  await cleanupAll();
});

it('hands out consecutive IDs in each form, each reading back as the ID minted', async () => {
  const first = source.nextIdSync();
  const base32: string = source.nextIdSync({ form: 'base32' });
  const decimal: string = await source.nextId({ form: 'decimal' });
  const spread: bigint[] = await source.nextIds(3, { form: 'spread' });
  const keyed: bigint = await source.nextId({ form: 'keyed' });
  const ids = [
    first,
    forms.parse(base32, 'base32'),
    forms.parse(decimal, 'decimal'),
    ...spread.map((s) => forms.parse(s, 'spread')),
    forms.parse(keyed, 'keyed'),
  ];
  expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
  expect(new Set(ids).size).toBe(ids.length);
  expect(new Set(ids.map((id) => DEFAULT_LAYOUT.decompose(id).region))).toEqual(new Set([2]));
});

it('refuses an unknown form, or keyed without a key, with a TypeError and mints no ID', async () => {
  const before = source.status().minted;
  expect(() => source.nextIdSync({ form: 'hex' as 'base32' })).toThrow(/the forms are base32, decimal, spread, keyed/);
  await expect(source.nextId({ form: 'hex' as 'base32' })).rejects.toThrow(TypeError);
  await expect(source.nextIds(2, { form: 'plain' as 'base32' })).rejects.toThrow(TypeError);
  expect(source.status().minted).toBe(before);
});

it('refuses a keyedFormKey of the wrong length before it touches etcd', () => {
  expect(() =>
    createEmbeddedIdSource({
      etcd: { endpoints: [etcd.clientUrl] },
      region: 2,
      timeSource: 'none',
      keyedFormKey: 'abcd',
    }),
  ).toThrow(/16 to 64 bytes/);
});
