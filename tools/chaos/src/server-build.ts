/**
 * Which `idgen-server` build a node process runs (issue 25, item 4): this tree's (`apps/server/dist/main.js`, or
 * `--server-main`'s) or a previous release's (`--previous-server`), so `rolling-restart` can make a run a rolling
 * upgrade and rollback across versions. Each build is started the way its own command starts it: the Node flags of
 * its bin's first line, then its entry (`@idgen/testing`'s `serverLaunchArgs` / `shebangNodeFlags`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { serverLaunchArgs, shebangNodeFlags } from '@idgen/testing';

/** One server build: what the report calls it, and the argv (after `node`) that starts it. */
export interface ServerBuild {
  /** `tree`, or the release's version (`0.1.0`) from its package.json. */
  readonly version: string;
  readonly command: readonly string[];
}

/** This tree's build: `serverMain` is `…/apps/server/dist/main.js` (or another checkout's). */
export function treeBuild(serverMain: string): ServerBuild {
  return { version: 'tree', command: serverLaunchArgs(serverMain) };
}

/**
 * A previous release: `path` is its `bin/idgen-server.js` (started with the flags of its shebang) or its
 * `dist/main.js` (started with the flags of the bin beside it); its version is read from the package.json above it.
 * Throws, naming the path, when neither is there.
 */
export function previousBuild(path: string): ServerBuild {
  if (!existsSync(path)) throw new Error(`--previous-server ${path} does not exist`);
  const isBin = basename(dirname(path)) === 'bin';
  const command = isBin ? [...shebangNodeFlags(path), path] : serverLaunchArgs(path);
  const manifest = join(dirname(path), '..', 'package.json');
  const version = existsSync(manifest)
    ? String((JSON.parse(readFileSync(manifest, 'utf8')) as { version?: unknown }).version ?? 'previous')
    : 'previous';
  return { version, command };
}
