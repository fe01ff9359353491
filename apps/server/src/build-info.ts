/**
 * What this node runs, so a region running mixed versions shows it: the server package's version and the source commit,
 * for GetStatus (fields 25-26) and `target_info` (`service.version`, `idgen.commit`). Read once at start; nothing here
 * runs a shell or a child process.
 */
import { readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, sep } from 'node:path';

/** The environment variable an image or CI sets to the commit it built (wins over the git checkout). */
export const COMMIT_ENV = 'IDGEN_COMMIT';

/** A commit as IDGEN_COMMIT may give it: a hash or a tag-like name, no spaces, at most 64 characters. */
const COMMIT_SHAPE = /^[A-Za-z0-9._+-]{1,64}$/;
/** A git object id (SHA-1 or SHA-256). */
const OBJECT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/** The node's version and commit, and where the commit came from (logged at start). */
export interface BuildInfo {
  readonly version: string;
  /** Empty when neither IDGEN_COMMIT nor a git checkout says. */
  readonly commit: string;
  readonly commitFrom: 'env' | 'git' | 'none';
  /** IDGEN_COMMIT was set but not usable: said once in the log, the git checkout asked instead. */
  readonly problem?: string;
}

/**
 * The version from the package.json in `packageDir`, the commit from `IDGEN_COMMIT`, else from the git checkout
 * `packageDir` lies in (when it is not an installed package: a `node_modules` copy must not report the commit of
 * the application that installed it), else empty.
 */
export function readBuildInfo(env: Readonly<Record<string, string | undefined>>, packageDir: string): BuildInfo {
  const version = packageVersion(packageDir);
  const given = env[COMMIT_ENV]?.trim();
  let problem: string | undefined;
  if (given !== undefined && given !== '') {
    if (COMMIT_SHAPE.test(given)) return { version, commit: given, commitFrom: 'env' };
    problem = `${COMMIT_ENV} is not a commit (1-64 characters of [A-Za-z0-9._+-]): ignored`;
  }
  const fromGit = packageDir.split(sep).includes('node_modules') ? undefined : gitCommit(packageDir);
  const found =
    fromGit === undefined
      ? { commit: '', commitFrom: 'none' as const }
      : { commit: fromGit, commitFrom: 'git' as const };
  return { version, ...found, ...(problem === undefined ? {} : { problem }) };
}

/** The `version` of `dir/package.json`, or `unknown`. */
export function packageVersion(dir: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * The commit HEAD points at in the git checkout that holds `dir` (searched upwards), read from the repository's
 * files as git stores them: `.git` a directory or a `gitdir:` file (worktrees, submodules), HEAD detached or a
 * ref, the ref loose or in `packed-refs`. `undefined` when there is no checkout or it cannot be read.
 */
export function gitCommit(dir: string): string | undefined {
  const gitDir = findGitDir(dir);
  if (gitDir === undefined) return undefined;
  // A worktree keeps HEAD in its own directory and the refs in the main repository's (`commondir`).
  const commonDir = resolveFrom(gitDir, readText(join(gitDir, 'commondir'))?.trim()) ?? gitDir;
  const head = readText(join(gitDir, 'HEAD'))?.trim();
  if (head === undefined) return undefined;
  if (OBJECT_ID.test(head)) return head;
  const ref = /^ref:\s*(refs\/\S+)$/.exec(head)?.[1];
  if (ref === undefined || ref.split('/').includes('..')) return undefined;
  for (const base of [gitDir, commonDir]) {
    const loose = readText(join(base, ref))?.trim();
    if (loose !== undefined && OBJECT_ID.test(loose)) return loose;
  }
  for (const line of (readText(join(commonDir, 'packed-refs')) ?? '').split('\n')) {
    const [id, name] = line.trim().split(' ');
    if (name === ref && id !== undefined && OBJECT_ID.test(id)) return id;
  }
  return undefined;
}

function findGitDir(start: string): string | undefined {
  for (let dir = start; ; dir = dirname(dir)) {
    const dotGit = join(dir, '.git');
    try {
      if (statSync(dotGit).isDirectory()) return dotGit;
      const pointer = /^gitdir:\s*(.+)$/m.exec(readFileSync(dotGit, 'utf8'))?.[1]?.trim();
      return resolveFrom(dir, pointer);
    } catch {
      // No .git here: look one level up.
    }
    if (dirname(dir) === dir) return undefined;
  }
}

function resolveFrom(base: string, path: string | undefined): string | undefined {
  if (path === undefined || path === '') return undefined;
  return isAbsolute(path) ? path : join(base, path);
}

function readText(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}
