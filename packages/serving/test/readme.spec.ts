import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, spawnProcess, tempDir, tsNodeArgs } from '@idgen/testing';

// The README opens with an example that embeds the serving port in a process of its own: run it, as written,
// in a child process, so the docs cannot rot (STYLE.md: "A README snippet that a test runs").
jest.setTimeout(60_000);
afterAll(() => cleanupAll());

const WORKSPACE_NODE_MODULES = join(__dirname, '..', '..', '..', 'node_modules');

/** The first ```ts block of the README. */
function firstExample(): string {
  const readme = readFileSync(join(__dirname, '..', 'README.md'), 'utf8');
  const match = /^```ts\n([\s\S]*?)^```$/m.exec(readme);
  if (match?.[1] === undefined) throw new Error('README.md has no ```ts block');
  expect(readme.indexOf('```ts')).toBeLessThan(readme.indexOf('\n## ')); // it opens the README
  return match[1];
}

it('the README example serves NextIds from an embedded port: ready, then three consecutive IDs of its region', async () => {
  const dir = await tempDir('idgen-serving-readme-');
  try {
    const file = join(dir.path, 'example.ts');
    writeFileSync(file, firstExample());
    const child = spawnProcess(process.execPath, tsNodeArgs(file), {
      // The example imports '@idgen/serving' like a user would: resolve it from the workspace.
      env: { ...process.env, NODE_PATH: WORKSPACE_NODE_MODULES },
    });
    const exit = await child.exited;
    expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
    const printed = JSON.parse(child.stdoutLines.join('\n')) as {
      ready: number;
      blocks: { first: string; count: number }[];
    };
    expect(printed.ready).toBe(200);
    expect(printed.blocks.reduce((n, b) => n + b.count, 0)).toBe(3);
    for (const b of printed.blocks) expect(Number((BigInt(b.first) >> 19n) & 7n)).toBe(3); // region bits 21..19
  } finally {
    await dir.remove();
  }
});
