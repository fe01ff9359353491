import { Code } from '@connectrpc/connect';
import { createServerMetrics } from './metrics.js';

describe('server metrics on /metrics', () => {
  it('counts RPCs and buckets their latency by method and code, cumulative, as Prometheus text', async () => {
    const metrics = createServerMetrics();
    try {
      // Each latency sits well inside its bucket (≥ 200 µs from the next boundary up): the call's own time
      // counts too. The first call (another method) warms the path up.
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
        const line = text.split('\n').find((l) => l.startsWith(`idgen_server_request_duration_${suffix}{${labels}${le === undefined ? '' : `,le="${le}"`}}`));
        if (line === undefined) throw new Error(`no ${suffix} ${code} ${le ?? ''} in:\n${text}`);
        return Number(line.split(' ').pop());
      };
      expect(text).toContain('# TYPE idgen_server_request_duration histogram');
      expect(series('count', 'ok')).toBe(3);
      const buckets = ['0.0001', '0.00025', '0.0005', '0.001', '0.002', '0.005', '+Inf'];
      expect(buckets.map((le) => series('bucket', 'ok', le))).toEqual([0, 0, 1, 1, 2, 3, 3]);
      expect(series('sum', 'ok')).toBeGreaterThan(0.0048);
      expect(series('sum', 'ok')).toBeLessThan(0.1);
      expect(series('count', 'invalid_argument')).toBe(1);
      expect(series('bucket', 'invalid_argument', '0.025')).toBe(0);
      expect(series('bucket', 'invalid_argument', '0.05')).toBe(1);
      expect(text).toMatch(/idgen_server_requests_total\{[^}]*rpc_response_status_code="ok"[^}]*\} 3/);
      expect(text).toMatch(/idgen_server_ids_served_total\{[^}]*\} 5/);
    } finally {
      await metrics.close();
    }
  });
});
