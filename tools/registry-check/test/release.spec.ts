import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PUBLIC_PACKAGES, ROOT, run } from '../src/packages.js';

// `nx release` as configured in nx.json (independent versions, conventional commits, a CHANGELOG.md per published
// package), run as a dry run in a clone of this checkout, on a branch from the first release (0.1.0, 2026-12-02), so the
// plan for a `feat` on @idgen/core is a patch of core (a 0.x minor) and of every package that depends on it, each
// with a changelog entry; a `docs` commit bumps nothing. The dry run touches no file, creates no tag and needs no
// network (publishing is skipped). The clone gets the release's tags when this checkout lacks them (a clone made
// without tags), so the spec means the same wherever it runs.
jest.setTimeout(300_000);

const RELEASE = '0.1.0';
const env = {
  ...process.env,
  NX_DAEMON: 'false',
  NX_NO_CLOUD: 'true',
  NX_TUI: 'false',
  FORCE_COLOR: '0',
  NO_COLOR: '1',
};
let clone = '';

async function git(args: readonly string[]): Promise<string> {
  const r = await run('git', args, { cwd: clone });
  if (r.code !== 0) throw new Error(`git ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
  return r.stdout.trim();
}

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'idgen-release-'));
  clone = join(dir, 'repo');
  const r = await run('git', ['clone', '-q', ROOT, clone], { cwd: dir });
  if (r.code !== 0) throw new Error(`git clone failed: ${r.stderr}`);
  symlinkSync(join(ROOT, 'node_modules'), join(clone, 'node_modules'));
  const release = await git(['log', '--grep=^chore(release): publish', '-1', '--format=%H']);
  if (release === '') throw new Error('no `chore(release): publish` commit: the first release has not been cut');
  for (const p of PUBLIC_PACKAGES) await git(['tag', '-f', `${p.name}@${RELEASE}`, release]);
  // From the release itself, so what landed since (feats and fixes of their own) does not enter the plan.
  await git(['checkout', '-q', '-B', 'release-spec', release]);
  await git(['config', 'user.email', 'release-spec@example.invalid']);
  await git(['config', 'user.name', 'release spec']);
});

afterAll(() => {
  if (clone !== '') rmSync(join(clone, '..'), { recursive: true, force: true });
});

/** The package and every public package that depends on it, directly or through others, from their manifests. */
/** The packages that depend on `name`, directly or not, as the clone's checkout (the release) declares them. */
function dependentsOf(name: string): Set<string> {
  const deps = new Map(
    PUBLIC_PACKAGES.map((p) => {
      const j = JSON.parse(readFileSync(join(clone, p.dir, 'package.json'), 'utf8')) as {
        dependencies?: Record<string, string>;
      };
      return [p.name, Object.keys(j.dependencies ?? {})] as const;
    }),
  );
  const found = new Set([name]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pkg, ds] of deps) {
      if (!found.has(pkg) && ds.some((d) => found.has(d))) {
        found.add(pkg);
        grew = true;
      }
    }
  }
  return found;
}

async function dryRun(): Promise<string> {
  const files = PUBLIC_PACKAGES.flatMap((p) => [join(p.dir, 'package.json'), join(p.dir, 'CHANGELOG.md')]);
  const before = files.map((f) => readFileSync(join(clone, f), 'utf8'));
  const tagsBefore = await git(['tag', '--list']);
  const r = await run('npx', ['nx', 'release', '--dry-run', '--skip-publish'], { cwd: clone, env });
  const output = r.stdout + r.stderr;
  expect({ code: r.code, tail: r.code === 0 ? '' : output.slice(-3000) }).toEqual({ code: 0, tail: '' });
  expect(output).toContain('The "dryRun" flag means no changes were made');
  expect(files.map((f) => readFileSync(join(clone, f), 'utf8'))).toEqual(before);
  expect(await git(['tag', '--list'])).toBe(tagsBefore);
  return output;
}

it('every public package was released as 0.1.0: its version on disk and its changelog section', () => {
  for (const p of PUBLIC_PACKAGES) {
    const manifest = JSON.parse(readFileSync(join(ROOT, p.dir, 'package.json'), 'utf8')) as { version: string };
    const changelog = readFileSync(join(ROOT, p.dir, 'CHANGELOG.md'), 'utf8');
    expect({ pkg: p.name, released: changelog.includes(`## ${RELEASE} (2026-12-02)`) }).toEqual({
      pkg: p.name,
      released: true,
    });
    expect({ pkg: p.name, atLeast: manifest.version.localeCompare(RELEASE, 'en', { numeric: true }) >= 0 }).toEqual({
      pkg: p.name,
      atLeast: true,
    });
  }
});

it('nx release --dry-run after a feat on @idgen/core plans a patch of core and its dependents, each with a changelog entry', async () => {
  // A docs commit first: it bumps nothing on its own (nx.json's semverBump "none").
  writeFileSync(join(clone, 'packages/core/README.md'), '\nrelease spec: docs\n', { flag: 'a' });
  await git(['commit', '-qam', 'docs(core): a docs commit of the release spec']);
  const quiet = await dryRun();
  for (const p of PUBLIC_PACKAGES) expect(quiet).not.toContain(`${p.name} ✍️  New version`);

  writeFileSync(join(clone, 'packages/core/src/index.ts'), '\nexport const RELEASE_SPEC = 1;\n', { flag: 'a' });
  await git(['commit', '-qam', 'feat(core): a feature of the release spec']);
  const output = await dryRun();
  expect(output).toMatch(/@idgen\/core .*New version 0\.1\.1 written/);
  expect(output).toContain('Previewing an entry in packages/core/CHANGELOG.md for @idgen/core@0.1.1');
  expect(output).toContain('a feature of the release spec');
  // Core and every package that depends on it, directly or not ("because a dependency was bumped"), get a patch;
  // the rest (flags, h2, proto) nothing.
  const bumped = dependentsOf('@idgen/core');
  for (const p of PUBLIC_PACKAGES) {
    const planned = new RegExp(`${p.name.replace('/', '\\/')} .*New version 0\\.1\\.1 written`).test(output);
    expect({ pkg: p.name, planned }).toEqual({ pkg: p.name, planned: bumped.has(p.name) });
  }
  expect(bumped.size).toBeGreaterThan(1);
  expect(bumped.size).toBeLessThan(PUBLIC_PACKAGES.length);
});
