import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, tempDir, type TempDir } from '@idgen/testing';
import { COMMANDS, PUBLIC_PACKAGES, ROOT, expectedEngines, npm, packPackage, run } from '../src/packages.js';

// Every public package as npm would publish it: the tarball's contents, its manifest, and the two checks
// of published packages (attw: types resolve for every module system; publint: the manifest and files agree).
jest.setTimeout(600_000);

let dir: TempDir;
const tarballs = new Map<string, string>();

beforeAll(async () => {
  dir = await tempDir('idgen-pack-');
  for (const pkg of PUBLIC_PACKAGES) {
    tarballs.set(pkg.name, await packPackage(pkg, join(dir.path, 'stage', pkg.name), join(dir.path, 'out')));
  }
});

afterAll(async () => {
  await cleanupAll();
});

async function listTarball(tgz: string): Promise<string[]> {
  const r = await run('tar', ['-tzf', tgz], { cwd: ROOT });
  expect(r.code).toBe(0);
  return r.stdout
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => l.replace(/^package\//, ''));
}

async function manifestOf(tgz: string): Promise<Record<string, unknown>> {
  const r = await run('tar', ['-xzOf', tgz, 'package/package.json'], { cwd: ROOT });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe.each(PUBLIC_PACKAGES.map((p) => [p.name, p] as const))('%s', (name, pkg) => {
  const tgz = (): string => tarballs.get(name) ?? '';

  it('ships its build, its sources for the source maps, README, CHANGELOG and LICENSE, and no build state', async () => {
    const files = await listTarball(tgz());
    expect(files).toEqual(expect.arrayContaining(['package.json', 'LICENSE', 'README.md', 'CHANGELOG.md']));
    expect(
      files.filter((f) => f.endsWith('.tsbuildinfo') || f.includes('.spec.') || f.includes('test-helper')),
    ).toEqual([]);
    expect(files.some((f) => f.startsWith('src/') && f.endsWith('.ts'))).toBe(true);
    // No stale output: every built module has its source (tsc -b never deletes the output of a removed file).
    const stale = files
      .filter((f) => /^dist\/(cjs|esm)\/.*\.js$/.test(f))
      .map((f) => f.replace(/^dist\/(cjs|esm)\//, 'src/').replace(/\.js$/, '.ts'))
      .filter((src) => !files.includes(src));
    expect({ stale, hint: stale.length === 0 ? '' : `rm -rf ${pkg.dir}/dist and build again` }).toEqual({
      stale: [],
      hint: '',
    });
    // Every source map's sources are in the tarball.
    const maps = files.filter((f) => f.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(0);
    const missing: string[] = [];
    for (const map of maps.slice(0, 20)) {
      const r = await run('tar', ['-xzOf', tgz(), `package/${map}`], { cwd: ROOT });
      const { sources } = JSON.parse(r.stdout) as { sources: string[] };
      for (const s of sources) {
        const resolved = join(map, '..', s);
        if (!files.includes(resolved)) missing.push(`${map} -> ${resolved}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('publishes a manifest without workspace-only parts, with ranges between our packages', async () => {
    const m = await manifestOf(tgz());
    const text = JSON.stringify(m);
    expect(text).not.toContain('@idgen/source');
    expect(m['nx']).toBeUndefined();
    expect(m['license']).toBe('MIT');
    expect(m['engines']).toEqual(expectedEngines(name)); // libraries >=22, the CLI >=24
    expect(m['repository']).toBeDefined();
    const deps = {
      ...(m['dependencies'] as Record<string, string> | undefined),
      ...(m['peerDependencies'] as Record<string, string> | undefined),
    };
    const exact = Object.entries(deps).filter(([k, v]) => k.startsWith('@idgen/') && !v.startsWith('^'));
    expect(exact).toEqual([]);
    expect(readFileSync(join(ROOT, pkg.dir, 'package.json'), 'utf8')).toContain('"name"'); // the working tree is untouched
  });

  it('passes publint (strict) on the packed files', async () => {
    const unpacked = join(dir.path, 'unpacked', name);
    await run('mkdir', ['-p', unpacked], { cwd: ROOT });
    expect((await run('tar', ['-xzf', tgz(), '-C', unpacked, '--strip-components=1'], { cwd: ROOT })).code).toBe(0);
    const r = await npm(['exec', '--no', '--', 'publint', unpacked, '--strict', '--pack', 'false'], ROOT);
    expect({ code: r.code, output: r.stdout + r.stderr }).toMatchObject({ code: 0 });
  });

  it('passes attw: the types resolve for node10, node16 (CommonJS and ESM) and bundlers', async () => {
    const bin = COMMANDS[name];
    if (bin !== undefined) {
      // A command, not a library: it has no types to check; it must have its bin.
      const m = await manifestOf(tgz());
      expect(m['bin']).toEqual(bin);
      return;
    }
    const r = await npm(['exec', '--no', '--', 'attw', tgz(), '--format', 'ascii'], ROOT);
    expect({ code: r.code, output: r.stdout + r.stderr }).toMatchObject({ code: 0 });
  });
});
