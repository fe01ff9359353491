import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseNodeMetrics, sumNodeMetrics } from './node-metrics.js';
import { callerFiles, decodeIds, decodeTimes, encodeIds, encodeTimes, readCallerRecords } from './records.js';

describe('caller records', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'chaos-records-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('round-trips IDs as 8-byte big-endian records, including the largest ID', () => {
    const ids = [0n, 1n, 104148763141017605n, 2n ** 63n - 1n];
    const buf = encodeIds(ids);
    expect(buf.length).toBe(32);
    expect(buf.subarray(8, 16).toString('hex')).toBe('0000000000000001');
    expect(Array.from(decodeIds(buf))).toEqual(ids);
  });

  it('drops a torn last record', () => {
    const buf = Buffer.concat([encodeIds([7n]), Buffer.from([1, 2, 3])]);
    expect(Array.from(decodeIds(buf))).toEqual([7n]);
    expect(Array.from(decodeTimes(Buffer.concat([encodeTimes([1.5]), Buffer.from([9])])))).toEqual([1.5]);
  });

  it('reads back what a caller wrote, skipping a torn JSON line', async () => {
    const f = callerFiles(dir, 4);
    await writeFile(f.ids, encodeIds([10n, 11n]));
    await writeFile(
      f.blocks,
      `${JSON.stringify({ node: 'http://x', first: '10', count: 2, receivedMs: 5 })}\n{"node":`,
    );
    await writeFile(f.calls, encodeTimes([5, 6]));
    await writeFile(f.failures, `${JSON.stringify({ atMs: 7, code: 'ids-unavailable', message: 'm' })}\n`);
    const r = await readCallerRecords(dir, 4);
    expect(Array.from(r.handedOut)).toEqual([10n, 11n]);
    expect(r.blocks).toEqual([{ caller: 4, node: 'http://x', first: 10n, count: 2, receivedMs: 5 }]);
    expect(Array.from(r.timeline.successMs)).toEqual([5, 6]);
    expect(r.timeline.failureMs).toEqual([7]);
  });

  it('reads a caller that wrote nothing as empty', async () => {
    const r = await readCallerRecords(dir, 9);
    expect(r.handedOut.length).toBe(0);
    expect(r.blocks).toEqual([]);
  });
});

describe('parseNodeMetrics', () => {
  const text = [
    '# HELP idgen_fences_total Times minting was fenced (refused), by reason.',
    '# TYPE idgen_fences_total counter',
    'idgen_fences_total{reason="not-assigned",otel_scope_name="@idgen/clock-guard"} 1',
    'idgen_fences_total{reason="lease",otel_scope_name="@idgen/clock-guard"} 3',
    'idgen_clock_rollbacks_total{outcome="waited",otel_scope_name="@idgen/clock-guard"} 2',
    'idgen_clock_rollbacks_total{outcome="fenced",otel_scope_name="@idgen/clock-guard"} 1',
    'idgen_ids_minted_total{otel_scope_name="@idgen/clock-guard"} 12345',
    'idgen_lease_churn_total{event="acquired",otel_scope_name="@idgen/lease"} 2',
    'idgen_lease_keepalive_age{otel_scope_name="@idgen/lease"} 0.53',
  ].join('\n');

  it('reads fences by reason, rollbacks, minted IDs and lease churn', () => {
    expect(parseNodeMetrics(text)).toEqual({
      fences: { 'not-assigned': 1, lease: 3 },
      rollbacksWaited: 2,
      rollbacksFenced: 1,
      idsMinted: 12345,
      leaseChurn: { acquired: 2 },
    });
  });

  it('adds the samples of several node processes', () => {
    const one = parseNodeMetrics(text);
    const sum = sumNodeMetrics([one, one]);
    expect(sum.fences).toEqual({ 'not-assigned': 2, lease: 6 });
    expect(sum.idsMinted).toBe(24690);
    expect(sum.rollbacksWaited).toBe(4);
  });
});
