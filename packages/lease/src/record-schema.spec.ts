import { CorruptRecordError, UnreadableSchemaError } from './errors.js';
import { RECORD_SCHEMA_READ, parseLastMsRecord, parseLayoutRecord, parseServingNode } from './records.js';
import { parseRegionBinding } from './region-binding.js';
import { DEFAULT_LOAN_TERM_MS, loanTermOf, parseRegistryDeployment } from './registry-identity.js';
import { newLoanTimes, parseRegistryRecord } from './spare-registry.js';
import { parseSpareCodeRecord } from './spare-codes.js';
import { parseTenureRecord } from './tenure-ledger.js';

// docs/design.md §5 "Record schema": a record without `schema` is schema 1 (release 0.1.0's); this release reads up
// to RECORD_SCHEMA_READ and refuses a newer one with one line naming the key and both schemas, through every parser.

const lastMs = { ms: 1_800_000_000_000, released: true, nodeId: 'n1', at: '2026-12-02T00:00:00Z', ttlMs: 10_000 };
const layout = { epochMs: 1_704_067_200_000, timestampBits: 41, regionBits: 3, workerBits: 7, sequenceBits: 12 };
const newer = RECORD_SCHEMA_READ + 1;

/** Every record parser, with a record it reads (of schema 1, as 0.1.0 wrote it). */
const parsers: [string, (key: string, raw: string) => unknown, Record<string, unknown>][] = [
  ['last-ms', parseLastMsRecord, lastMs],
  ['layout', parseLayoutRecord, layout],
  [
    'serving node',
    parseServingNode,
    { nodeId: 'n1', region: 2, worker: 5, address: 'http://127.0.0.1:1', startedAt: '2026-12-02T00:00:00Z' },
  ],
  ['tenures', parseTenureRecord, { tenures: [], compacted: { count: 0, maxLastMs: -1 } }],
  ['region binding', parseRegionBinding, { code: 2, clusterId: '123', at: '2026-12-02T00:00:00Z' }],
  ['registry', parseRegistryRecord, { code: 5, state: 'lent', lentTo: 2, at: '2026-12-02T00:00:00Z' }],
];

it('reads schema 1 up to this release: 0.1.0 wrote no field, so no field is schema 1', () => {
  expect(RECORD_SCHEMA_READ).toBe(1);
  expect(parseLastMsRecord('/idgen/regions/2/last-ms/5', JSON.stringify(lastMs))).toMatchObject({ ms: lastMs.ms });
  expect(parseLastMsRecord('/idgen/regions/2/last-ms/5', JSON.stringify({ ...lastMs, schema: 1 }))).toMatchObject({
    ms: lastMs.ms,
  });
});

it.each(parsers)(
  'the %s parser refuses a record of a newer schema, naming the key and both schemas',
  (_, parse, record) => {
    const key = '/idgen/some/5'; // a registry record's key ends in its code
    expect(() => parse(key, JSON.stringify(record))).not.toThrow();
    let thrown: unknown;
    try {
      parse(key, JSON.stringify({ ...record, schema: newer }));
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(UnreadableSchemaError);
    expect(thrown).toBeInstanceOf(CorruptRecordError); // refused like garbage wherever a record is read
    const message = (thrown as Error).message;
    expect(message.split('\n')).toHaveLength(1);
    expect(message).toContain(key);
    expect(message).toContain(`schema ${newer}, and this release reads schemas up to ${RECORD_SCHEMA_READ}`);
    expect(thrown).toMatchObject({ schema: newer, readable: RECORD_SCHEMA_READ, key, code: 'record-schema' });
  },
);

it('the spare-code parser refuses a newer schema too', () => {
  const record = { code: 5, state: 'lent', lentTo: 2, at: '2026-12-02T00:00:00Z', lastMs: 0 };
  expect(() => parseSpareCodeRecord('/idgen/spare-codes/5', JSON.stringify({ ...record, schema: newer }))).toThrow(
    UnreadableSchemaError,
  );
});

it.each([0, -1, 1.5, '2', null, true])(
  'a schema field of %p is garbage (CorruptRecordError), not a schema',
  (schema) => {
    let thrown: unknown;
    try {
      parseLastMsRecord('/idgen/regions/2/last-ms/5', JSON.stringify({ ...lastMs, schema }));
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(CorruptRecordError);
    expect(thrown).not.toBeInstanceOf(UnreadableSchemaError);
    expect((thrown as Error).message).toContain('field schema is not a positive integer');
  },
);

// docs/design.md §7 "Loan terms": a registry record's term and the deployment's loan term, read or refused as garbage.
it.each([
  [{ untilMs: 1_800_000_000_000 }, 1_800_000_000_000],
  [{}, undefined],
])('a registry record with %p has the term %p', (extra, until) => {
  const raw = JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at: '2026-12-02T00:00:00Z', ...extra });
  expect(parseRegistryRecord('/idgen/spare-registry/5', raw).untilMs).toBe(until);
});

it.each(['soon', -1, 1.5, null])('a registry record whose untilMs is %p is garbage, named', (untilMs) => {
  const raw = JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at: '2026-12-02T00:00:00Z', untilMs });
  expect(() => parseRegistryRecord('/idgen/spare-registry/5', raw)).toThrow(/field untilMs is not a millisecond/);
});

// docs/design.md §7 "A new loan's first claim waits": the time a new loan may first be claimed under.
it.each([
  [{ usableFromMs: 1_800_000_000_000 }, 1_800_000_000_000],
  [{}, undefined],
])('a registry record with %p may first be claimed under from %p', (extra, usableFrom) => {
  const raw = JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at: '2026-12-02T00:00:00Z', ...extra });
  expect(parseRegistryRecord('/idgen/spare-registry/5', raw).usableFromMs).toBe(usableFrom);
});

it.each(['soon', -1, 1.5, null])('a registry record whose usableFromMs is %p is garbage, named', (usableFromMs) => {
  const raw = JSON.stringify({ code: 5, state: 'lent', lentTo: 2, at: '2026-12-02T00:00:00Z', usableFromMs });
  expect(() => parseRegistryRecord('/idgen/spare-registry/5', raw)).toThrow(
    /field usableFromMs is not a millisecond timestamp/,
  );
});

it('a new loan waits a term, a quarter term and the clock bound, and its first term runs a term past that', () => {
  expect(newLoanTimes(1_000_000, 600_000, 10)).toEqual({ usableFromMs: 1_750_010, untilMs: 2_350_010 });
  // A term of four TTLs of 3 s: the quarter is one TTL, rounded up to the millisecond.
  expect(newLoanTimes(0, 12_001, 10)).toEqual({ usableFromMs: 15_012, untilMs: 27_013 });
});

it.each([
  [{ loanTermMs: 24_000 }, 24_000],
  [{}, DEFAULT_LOAN_TERM_MS],
])('the registry deployment record %p pins the loan term %p', (extra, term) => {
  const raw = JSON.stringify({ deploymentId: 'd', at: '2026-12-02T00:00:00Z', ...extra });
  expect(loanTermOf(parseRegistryDeployment('/idgen/spare-registry/deployment', raw))).toBe(term);
});

it.each([999, 'ten', 1.5])('a deployment record whose loanTermMs is %p is garbage, named', (loanTermMs) => {
  const raw = JSON.stringify({ deploymentId: 'd', at: 't', loanTermMs });
  expect(() => parseRegistryDeployment('/idgen/spare-registry/deployment', raw)).toThrow(/field loanTermMs/);
});
