import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PUBLIC_PACKAGES, ROOT, run } from './packages.js';

// `nx release` as configured in nx.json (independent versions, conventional commits, a CHANGELOG.md per
// published package), run as a dry run: it must plan a version and a changelog entry for every public
// package, touch no file and create no tag, and need no network (publishing is skipped).
jest.setTimeout(300_000);

it('nx release --dry-run plans a version and a changelog entry for each public package and changes nothing', async () => {
  const files = PUBLIC_PACKAGES.flatMap((p) => [join(p.dir, 'package.json'), join(p.dir, 'CHANGELOG.md')]);
  const before = files.map((f) => readFileSync(join(ROOT, f), 'utf8'));
  const tagsBefore = (await run('git', ['tag', '--list'], { cwd: ROOT })).stdout;

  const r = await run('npx', ['nx', 'release', '--dry-run', '--skip-publish'], {
    cwd: ROOT,
    env: { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true', NX_TUI: 'false', FORCE_COLOR: '0', NO_COLOR: '1' },
  });
  const output = r.stdout + r.stderr;
  expect({ code: r.code, tail: r.code === 0 ? '' : output.slice(-3000) }).toEqual({ code: 0, tail: '' });
  for (const pkg of PUBLIC_PACKAGES) {
    expect({
      pkg: pkg.name,
      version: new RegExp(`${pkg.name.replace('/', '\\/')}.*New version \\d+\\.\\d+\\.\\d+ written`).test(output),
    }).toEqual({
      pkg: pkg.name,
      version: true,
    });
    expect(output).toContain(`Previewing an entry in ${pkg.dir}/CHANGELOG.md for ${pkg.name}@`);
  }
  expect(output).toContain('The "dryRun" flag means no changes were made');
  expect(files.map((f) => readFileSync(join(ROOT, f), 'utf8'))).toEqual(before);
  expect((await run('git', ['tag', '--list'], { cwd: ROOT })).stdout).toBe(tagsBefore);
});
