import { request } from 'node:http';
import { parseHostPort } from './host-port.js';
import { listenSidePort } from './side-port.js';

function get(address: string, method: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`http://${address}${path}`, { method, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('listenSidePort', () => {
  it('answers /metrics from its handler, the probes from the serving port, 404 otherwise; close frees the port', async () => {
    const side = await listenSidePort(
      { host: '127.0.0.1', port: 0 },
      {
        metrics: (_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('idgen_up 1\n'),
        probe: (method, path) =>
          path === '/readyz' && (method === 'GET' || method === 'HEAD')
            ? { status: 503, headers: { 'content-type': 'text/plain' }, body: 'not ready: fenced\n' }
            : undefined,
      },
    );
    try {
      expect(side.address).toMatch(/^127\.0\.0\.1:\d+$/);
      expect(await get(side.address, 'GET', '/metrics?x=1')).toEqual({ status: 200, body: 'idgen_up 1\n' });
      expect(await get(side.address, 'GET', '/readyz')).toEqual({ status: 503, body: 'not ready: fenced\n' });
      expect(await get(side.address, 'HEAD', '/readyz')).toEqual({ status: 503, body: '' });
      expect((await get(side.address, 'POST', '/metrics')).status).toBe(404);
      expect((await get(side.address, 'GET', '/idgen.v1.IdGenerator/NextIds')).status).toBe(404);
    } finally {
      await side.close();
    }
    await expect(get(side.address, 'GET', '/metrics')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('rejects when it cannot listen', async () => {
    const first = await listenSidePort({ host: '127.0.0.1', port: 0 }, {});
    try {
      const port = Number(first.address.split(':')[1]);
      await expect(listenSidePort({ host: '127.0.0.1', port }, {})).rejects.toMatchObject({ code: 'EADDRINUSE' });
    } finally {
      await first.close();
    }
  });
});

describe('parseHostPort', () => {
  it.each([
    ['127.0.0.1:8080', true, { host: '127.0.0.1', port: 8080 }],
    ['[::1]:0', true, { host: '::1', port: 0 }],
    ['node-1.example:443', false, { host: 'node-1.example', port: 443 }],
    ['host:0', false, undefined],
    ['8080', true, undefined],
    ['127.0.0.1:65536', true, undefined],
    ['::1:80', true, undefined],
  ])('%s (port 0 allowed: %s)', (text, allowZero, expected) => {
    expect(parseHostPort(text, allowZero)).toEqual(expected);
  });
});
