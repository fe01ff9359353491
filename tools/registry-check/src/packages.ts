import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The workspace root. */
export const ROOT = join(__dirname, '..', '..', '..');

/** The packages a caller installs from a registry, in publish order (dependencies first). */
export const PUBLIC_PACKAGES: readonly { readonly name: string; readonly dir: string }[] = [
  { name: '@idgen/core', dir: 'packages/core' },
  { name: '@idgen/flags', dir: 'packages/flags' },
  { name: '@idgen/proto', dir: 'packages/proto' },
  { name: '@idgen/h2', dir: 'packages/h2' },
  { name: '@idgen/clock-guard', dir: 'packages/clock-guard' },
  { name: '@idgen/lease', dir: 'packages/lease' },
  { name: '@idgen/serving', dir: 'packages/serving' },
  { name: '@idgen/discovery', dir: 'packages/discovery' },
  { name: '@idgen/client', dir: 'packages/client' },
  { name: '@idgen/embedded', dir: 'packages/embedded' },
  { name: '@idgen/server', dir: 'apps/server' },
  { name: '@idgen/cli', dir: 'apps/cli' },
];

/** The public packages that are commands on the runtime, not libraries, and the `bin` each publishes. */
export const COMMANDS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  '@idgen/server': { 'idgen-server': './bin/idgen-server.js' },
  '@idgen/cli': { idgen: './bin/idgen.js' },
};

/** Node 24 LTS: the runtime: the server, the CLI and the workspace declare `"node": ">=24"`. */
export const RUNTIME_NODE_MAJOR = 24;

/**
 * Node 22: the floor of the published libraries while it is maintained, `"node": ">=22"`; registry.spec.ts
 * installs and runs them on it as well as on {@link RUNTIME_NODE_MAJOR}.
 */
export const LIBRARY_NODE_MAJOR = 22;

/**
 * The `engines` a public package publishes: the server and the CLI are commands on the runtime, the rest are libraries; `@idgen/flags`
 * wants 22.12, where Node `require()`s ES modules unflagged (its commander 15 ships ES modules only).
 */
export function expectedEngines(name: string): { node: string } {
  if (COMMANDS[name] !== undefined) return { node: `>=${RUNTIME_NODE_MAJOR}` };
  return { node: name === '@idgen/flags' ? `>=${LIBRARY_NODE_MAJOR}.12` : `>=${LIBRARY_NODE_MAJOR}` };
}

/**
 * The `node` binary of a Node major, fetched once from the npm registry by tools/scripts/node.sh (`.cache/node-<major>/`).
 * Throws with the script's reason when it cannot be fetched: a missing runtime fails the round trip, never skips it.
 */
export async function nodeBinary(major: number): Promise<string> {
  const r = await run('bash', [join(ROOT, 'tools/scripts/node.sh'), String(major)], { cwd: ROOT });
  const bin = r.stdout.trim();
  if (r.code !== 0 || bin === '') throw new Error(`tools/scripts/node.sh ${major} failed (${r.code}):\n${r.stderr}`);
  return join(bin, 'node');
}

export interface RunResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command to its end (never rejects on a non-zero exit: the caller asserts on `code`). */
export function run(
  cmd: string,
  args: readonly string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      {
        cwd: options.cwd,
        env: options.env ?? process.env,
        timeout: options.timeoutMs ?? 240_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
        resolve({
          code,
          stdout,
          stderr: error !== null && typeof error.code !== 'number' ? `${stderr}\n${error.message}` : stderr,
        });
      },
    );
  });
}

/** `npm` with the workspace's user config untouched but no update checks or audits. */
export function npm(args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<RunResult> {
  return run('npm', ['--no-audit', '--no-fund', '--no-update-notifier', ...args], { cwd, env });
}

/**
 * Packs a package the way `npm publish` does, without touching the working tree (other work goes on in it):
 * copies the files npm would pack into `stageDir`, runs the package's own `prepack` step there (the build
 * already ran) and packs that copy. Returns the tarball's path.
 */
export async function packPackage(pkg: { dir: string }, stageDir: string, outDir: string): Promise<string> {
  const source = join(ROOT, pkg.dir);
  const listed = await npm(['pack', '--dry-run', '--json', '--ignore-scripts'], source);
  if (listed.code !== 0) throw new Error(`npm pack --dry-run in ${pkg.dir} failed:\n${listed.stderr}`);
  const [info] = JSON.parse(listed.stdout) as { files: { path: string }[] }[];
  if (info === undefined) throw new Error(`npm pack --dry-run in ${pkg.dir} listed nothing`);
  for (const { path } of info.files) {
    mkdirSync(dirname(join(stageDir, path)), { recursive: true });
    cpSync(join(source, path), join(stageDir, path));
  }
  const prepack = await run(process.execPath, [join(ROOT, 'tools/scripts/pack.mjs'), 'prepack'], {
    cwd: stageDir,
    env: { ...process.env, IDGEN_PACK_SKIP_BUILD: '1' },
  });
  if (prepack.code !== 0) throw new Error(`prepack of ${pkg.dir} failed:\n${prepack.stderr}`);
  mkdirSync(outDir, { recursive: true });
  const packed = await npm(['pack', '--json', '--ignore-scripts', '--pack-destination', outDir], stageDir);
  if (packed.code !== 0) throw new Error(`npm pack of ${pkg.dir} failed:\n${packed.stderr}`);
  const [out] = JSON.parse(packed.stdout) as { filename: string }[];
  if (out === undefined) throw new Error(`npm pack of ${pkg.dir} wrote nothing`);
  return join(outDir, out.filename);
}

/** Installed packages (directories with a package.json under node_modules, nested ones too) and bytes on disk. */
export function installSize(nodeModules: string): { packages: number; bytes: number; names: string[] } {
  const names: string[] = [];
  let bytes = 0;
  const walkBytes = (p: string): void => {
    const st = statSync(p, { throwIfNoEntry: false });
    if (st === undefined) return;
    if (st.isDirectory()) for (const e of readdirSync(p)) walkBytes(join(p, e));
    else if (st.isFile()) bytes += st.size;
  };
  const walkPackages = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
      const path = join(dir, entry.name);
      if (entry.name.startsWith('@')) {
        walkPackages(path);
        continue;
      }
      const manifest = join(path, 'package.json');
      if (statSync(manifest, { throwIfNoEntry: false })?.isFile()) {
        names.push((JSON.parse(readFileSync(manifest, 'utf8')) as { name: string }).name);
        const nested = join(path, 'node_modules');
        if (statSync(nested, { throwIfNoEntry: false })?.isDirectory()) walkPackages(nested);
      }
    }
  };
  walkPackages(nodeModules);
  walkBytes(nodeModules);
  return { packages: names.length, bytes, names: names.sort() };
}
