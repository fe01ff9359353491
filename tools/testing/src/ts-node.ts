import { join } from 'node:path';

/** Path of the harness's require hook that lets `node` run workspace TypeScript sources. */
export const REGISTER_TS_PATH = join(__dirname, '..', 'register-ts.cjs');

/**
 * Node arguments that run a TypeScript file of this workspace in a child process, resolving workspace
 * packages to their sources as jest does: `spawnProcess(process.execPath, tsNodeArgs(file, ...args))`.
 */
export function tsNodeArgs(script: string, ...args: string[]): string[] {
  return ['--conditions=@idgen/source', '--require', REGISTER_TS_PATH, script, ...args];
}
