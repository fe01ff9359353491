import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, relative } from 'node:path';
import { create, fromBinary, toBinary, toJson, fromJson } from '@bufbuild/protobuf';
import {
  GetStatusResponseSchema,
  HealthCheckResponse_ServingStatus,
  Health,
  IdBlockSchema,
  IdGenerator,
  NextIdsRequestSchema,
  NextIdsResponseSchema,
  NodeState,
  ReadinessReason,
} from './index.js';

const projectDir = join(__dirname, '..');
const bufBinary = join(dirname(require.resolve('@bufbuild/buf/package.json')), 'bin', 'buf');
// `buf.gen.yaml` names the plugin `local: protoc-gen-es`: buf looks it up on PATH.
const pluginDir = join(dirname(require.resolve('@bufbuild/protoc-gen-es/package.json')), 'bin');
const env = { ...process.env, PATH: `${pluginDir}${delimiter}${process.env['PATH'] ?? ''}` };

function buf(...args: string[]): string {
  return execFileSync(bufBinary, args, { cwd: projectDir, env, encoding: 'utf8', stdio: 'pipe' });
}

function filesUnder(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.set(relative(dir, p), readFileSync(p, 'utf8'));
    }
  };
  walk(dir);
  return out;
}

describe('the proto module', () => {
  it('is buf lint clean', () => {
    // Throws with buf's findings on stderr if any rule fails.
    expect(buf('lint')).toBe('');
  });

  it('has committed generated code identical to a fresh `buf generate` (run `npx nx run @idgen/proto:generate`)', () => {
    const out = mkdtempSync(join(tmpdir(), 'idgen-proto-'));
    try {
      // `-o` prefixes the template's `out: src/gen`, so the fresh copy lands in {out}/src/gen.
      buf('generate', '-o', out);
      const fresh = filesUnder(join(out, 'src', 'gen'));
      const committed = filesUnder(join(projectDir, 'src', 'gen'));
      expect([...committed.keys()].sort()).toEqual([...fresh.keys()].sort());
      for (const [name, text] of fresh) {
        expect({ name, text: committed.get(name) }).toEqual({ name, text });
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});

describe('the wire contract (docs/design.md §6)', () => {
  it('keeps the NextIds field numbers and types', () => {
    const fields = (schema: { fields: readonly { name: string; number: number; scalar?: number }[] }) =>
      schema.fields.map((f) => [f.name, f.number]);
    expect(fields(NextIdsRequestSchema)).toEqual([['count', 1]]);
    expect(fields(IdBlockSchema)).toEqual([
      ['first', 1],
      ['count', 2],
    ]);
    expect(fields(NextIdsResponseSchema)).toEqual([['blocks', 1]]);
    // count=1 as varint (tag 0x08); first=1 as fixed64 (tag 0x09) then count=2 (tag 0x10).
    expect([...toBinary(NextIdsRequestSchema, create(NextIdsRequestSchema, { count: 3 }))]).toEqual([0x08, 3]);
    const block = create(IdBlockSchema, { first: 104148763141017605n, count: 2 });
    const bytes = toBinary(IdBlockSchema, block);
    expect(bytes[0]).toBe(0x09);
    expect(bytes[9]).toBe(0x10);
    expect(fromBinary(IdBlockSchema, bytes).first).toBe(104148763141017605n);
  });

  it('carries fixed64 IDs as decimal strings in JSON', () => {
    const response = create(NextIdsResponseSchema, { blocks: [{ first: (1n << 63n) - 1n, count: 1 }] });
    expect(toJson(NextIdsResponseSchema, response)).toEqual({ blocks: [{ first: '9223372036854775807', count: 1 }] });
    expect(fromJson(NextIdsResponseSchema, { blocks: [{ first: '5', count: 2 }] }).blocks[0]?.first).toBe(5n);
  });

  it('names the services and methods callers dial', () => {
    expect(IdGenerator.typeName).toBe('idgen.v1.IdGenerator');
    expect(Object.keys(IdGenerator.method).sort()).toEqual(['getStatus', 'nextIds']);
    expect(IdGenerator.method.nextIds.name).toBe('NextIds');
    expect(Health.typeName).toBe('grpc.health.v1.Health');
    expect(Health.method.check.name).toBe('Check');
    expect(HealthCheckResponse_ServingStatus.SERVING).toBe(1);
    expect(HealthCheckResponse_ServingStatus.NOT_SERVING).toBe(2);
  });

  it('keeps the GetStatusResponse field numbers (the header of idgen.proto lists them)', () => {
    expect(GetStatusResponseSchema.fields.map((f) => [f.name, f.number])).toEqual([
      ['region', 1],
      ['worker', 2],
      ['node_id', 3],
      ['state', 4],
      ['fence_reason', 5],
      ['fence_message', 6],
      ['lease_id', 7],
      ['keep_alive_age_seconds', 8],
      ['clock_state', 9],
      ['clock_offset_seconds', 10],
      ['clock_message', 11],
      ['layout', 12],
      ['lease_mode', 13],
      ['fence_deadline_in_ms', 14],
      ['floor_ms', 15],
      ['last_minted_ms', 16],
      ['advertise_address', 17],
      ['max_count', 18],
      ['ready', 19],
      ['readiness_reason', 20],
      ['readiness_cause', 21],
      ['readiness_detail', 22],
      ['readiness_wait_ms', 23],
      ['details_redacted', 24],
      ['version', 25],
      ['commit', 26],
    ]);
  });

  it('carries the readiness reason as its enum name in JSON', () => {
    const status = create(GetStatusResponseSchema, {
      ready: false,
      readinessReason: ReadinessReason.WAITING_FOR_FLOOR,
      readinessDetail: 'holding 2/17',
      readinessWaitMs: 1200n,
    });
    expect(toJson(GetStatusResponseSchema, status)).toMatchObject({
      readinessReason: 'READINESS_REASON_WAITING_FOR_FLOOR',
      readinessDetail: 'holding 2/17',
      readinessWaitMs: '1200',
    });
  });

  it('round-trips a status with its optional fields absent', () => {
    const status = create(GetStatusResponseSchema, { region: 2, nodeId: 'n1', state: NodeState.STARTING });
    const back = fromBinary(GetStatusResponseSchema, toBinary(GetStatusResponseSchema, status));
    expect(back.worker).toBeUndefined();
    expect(back.state).toBe(NodeState.STARTING);
    expect(toJson(GetStatusResponseSchema, back)).toEqual({ region: 2, nodeId: 'n1', state: 'NODE_STATE_STARTING' });
  });
});
