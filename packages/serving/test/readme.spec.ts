import { join } from 'node:path';
import { cleanupAll, readmeExample, runTsExample } from '@idgen/testing';

// The README opens with an example that embeds the serving port in a process of its own: run it, as written,
// in a child process, so the docs cannot rot (docs/style.md "Tests": a README snippet that a test runs).
jest.setTimeout(60_000);
afterAll(() => cleanupAll());

it('the README example serves NextIds from an embedded port: ready, then three consecutive IDs of its region', async () => {
  const { exit, child } = await runTsExample(readmeExample(join(__dirname, '..', 'README.md')));
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = JSON.parse(child.stdoutLines.join('\n')) as {
    ready: number;
    blocks: { first: string; count: number }[];
  };
  expect(printed.ready).toBe(200);
  expect(printed.blocks.reduce((n, b) => n + b.count, 0)).toBe(3);
  for (const b of printed.blocks) expect(Number((BigInt(b.first) >> 19n) & 7n)).toBe(3); // region bits 21..19
});
