import { Code } from '@connectrpc/connect';
import { createServerMetrics } from '../src/metrics.js';

describe('server metrics on /metrics', () => {
  it('counts RPCs and buckets their latency by method and code, cumulative, as Prometheus text', async () => {
    const metrics = createServerMetrics({ serviceVersion: '0.0.0-spec', instanceId: 'spec-node', runtime: false });
    try {
      // Latencies of at least 300 µs, 1.5 ms, 3 ms and 30 ms (the call's own time adds to each, by an amount a
      // busy machine does not bound): the assertions below hold whatever that amount is, up to seconds.
      const ago = (us: number): bigint => process.hrtime.bigint() - BigInt(us * 1000);
      metrics.recordRpc('idgen.v1.IdGenerator', 'GetStatus', undefined, ago(10), 0);
      metrics.recordRpc('idgen.v1.IdGenerator', 'NextIds', undefined, ago(300), 3);
      metrics.recordRpc('idgen.v1.IdGenerator', 'NextIds', undefined, ago(1500), 1);
      metrics.recordRpc('idgen.v1.IdGenerator', 'NextIds', undefined, ago(3000), 1);
      metrics.recordRpc('idgen.v1.IdGenerator', 'NextIds', Code.InvalidArgument, ago(30_000), 0);
      const address = await metrics.listen({ host: '127.0.0.1', port: 0 });
      const text = await (await fetch(`http://${address}/metrics`)).text();
      const series = (suffix: string, code: string, le?: string): number => {
        const labels = `rpc_service="idgen.v1.IdGenerator",rpc_method="NextIds",rpc_response_status_code="${code}",otel_scope_name="@idgen/server"`;
        const line = text
          .split('\n')
          .find((l) =>
            l.startsWith(`idgen_server_request_duration_${suffix}{${labels}${le === undefined ? '' : `,le="${le}"`}}`),
          );
        if (line === undefined) throw new Error(`no ${suffix} ${code} ${le ?? ''} in:\n${text}`);
        return Number(line.split(' ').pop());
      };
      expect(text).toContain('# TYPE idgen_server_request_duration histogram');
      expect(series('count', 'ok')).toBe(3);
      const buckets = [
        '0.0001',
        '0.00025',
        '0.0005',
        '0.001',
        '0.002',
        '0.005',
        '0.01',
        '0.025',
        '0.05',
        '0.1',
        '0.25',
        '1',
        '5',
        '+Inf',
      ];
      const cumulative = buckets.map((le) => series('bucket', 'ok', le));
      // Cumulative, never decreasing, all three by 5 s; none at or under 250 µs; at most one by 1 ms, two by 2 ms.
      cumulative.forEach((n, i) => expect(n).toBeGreaterThanOrEqual(cumulative[i - 1] ?? 0));
      expect(cumulative.slice(0, 2)).toEqual([0, 0]);
      expect(series('bucket', 'ok', '0.001')).toBeLessThanOrEqual(1);
      expect(series('bucket', 'ok', '0.002')).toBeLessThanOrEqual(2);
      expect(series('bucket', 'ok', '5')).toBe(3);
      expect(series('bucket', 'ok', '+Inf')).toBe(3);
      expect(series('sum', 'ok')).toBeGreaterThanOrEqual(0.0048);
      expect(series('count', 'invalid_argument')).toBe(1);
      expect(series('bucket', 'invalid_argument', '0.025')).toBe(0);
      expect(series('bucket', 'invalid_argument', '5')).toBe(1);
      expect(text).toMatch(/idgen_server_requests_total\{[^}]*rpc_response_status_code="ok"[^}]*\} 3/);
      expect(text).toMatch(/idgen_server_ids_served_total\{[^}]*\} 5/);
    } finally {
      await metrics.close();
    }
  });

  it('names the service on target_info and declares the event counters at 0 before any event', async () => {
    const metrics = createServerMetrics({ serviceVersion: '1.2.3', instanceId: 'node-7', runtime: false });
    try {
      metrics.observeNode(['ready', 'waiting-for-slot'], () => ({
        region: 2,
        ready: false,
        reason: 'waiting-for-slot',
        slotHeld: false,
        slots: 4,
      }));
      const address = await metrics.listen({ host: '127.0.0.1', port: 0 });
      const text = await (await fetch(`http://${address}/metrics`)).text();
      expect(text).toContain('idgen_node_ready{region="2",otel_scope_name="@idgen/server"} 0');
      expect(text).toContain('idgen_node_readiness{region="2",reason="ready",otel_scope_name="@idgen/server"} 0');
      expect(text).toContain(
        'idgen_node_readiness{region="2",reason="waiting-for-slot",otel_scope_name="@idgen/server"} 1',
      );
      expect(text).toContain('idgen_node_slot_held{region="2",otel_scope_name="@idgen/server"} 0');
      expect(text).toContain('idgen_region_slots{region="2",otel_scope_name="@idgen/server"} 4');
      const targetInfo = text.split('\n').find((l) => l.startsWith('target_info{'));
      expect(targetInfo).toContain('service_name="idgen-server"');
      expect(targetInfo).toContain('service_version="1.2.3"');
      expect(targetInfo).toContain('service_instance_id="node-7"');
      expect(text).toContain('idgen_server_request_timeouts_total{otel_scope_name="@idgen/server"} 0');
      expect(text).toContain('idgen_h2_refusals_total{otel_scope_name="@idgen/server"} 0');
      expect(text).toContain(
        'idgen_server_requests_total{rpc_service="idgen.v1.IdGenerator",rpc_method="NextIds",rpc_response_status_code="ok",otel_scope_name="@idgen/server"} 0',
      );
      expect(text).toContain(
        'idgen_server_request_duration_count{rpc_service="idgen.v1.IdGenerator",rpc_method="GetStatus",rpc_response_status_code="ok",otel_scope_name="@idgen/server"} 0',
      );
    } finally {
      await metrics.close();
    }
  });
});
