import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type ProcessHandle, serverLaunchArgs, spawnProcess, tempDirSync } from '@idgen/testing';

/** The repository root, from `tools/bench/dist/`. */
export const REPO = resolve(__dirname, '../../..');
/** The built server the network benchmarks start (apps are started as processes, never imported). */
export const SERVER_MAIN = join(REPO, 'apps/server/dist/main.js');

/**
 * Builds `@idgen/server` through Nx (cached when nothing changed): the bench cannot depend on the app, so
 * its own build does not rebuild it, and a stale `dist/` would measure old code.
 */
export function buildServer(): void {
  execFileSync('npx', ['nx', 'run', '@idgen/server:build', '--output-style=static'], {
    cwd: REPO,
    stdio: 'ignore',
    env: { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true' },
  });
}

/**
 * The built server of another checkout `dir` (`--baseline`): its `apps/server/dist/main.js`, started with the
 * launch flags of its own `apps/server/bin/idgen-server.js` (by {@link startIdgenServer}). Throws when either is
 * missing, before anything is started: a comparison with a build that is not there measures nothing.
 */
export function serverMainIn(dir: string): string {
  const main = join(resolve(dir), 'apps/server/dist/main.js');
  for (const file of [main, join(resolve(dir), 'apps/server/bin/idgen-server.js')]) {
    if (!existsSync(file))
      throw new Error(`${file} is missing: build the baseline first (in ${dir}: npx nx run @idgen/server:build)`);
  }
  return main;
}

/**
 * Starts one standalone node on `127.0.0.1:port` (no etcd, no chrony, no metrics listener: what is
 * measured is the serving path) and resolves once it logs `ready`. `extra`: more flags; `launchFlags: false`
 * starts it without the Node flags its command carries (V8's defaults); `main`: another build's
 * `apps/server/dist/main.js` (default {@link SERVER_MAIN}), with the flags of that build's own command.
 */
export async function startIdgenServer(
  port: number,
  extra: readonly string[] = [],
  o: { launchFlags?: boolean; main?: string } = {},
): Promise<ProcessHandle> {
  const main = o.main ?? SERVER_MAIN;
  const server = spawnProcess(process.execPath, [
    ...(o.launchFlags === false ? [main] : serverLaunchArgs(main)),
    '--standalone',
    '--state-file',
    join(tempDirSync('bench-standalone').path, 'state.json'),
    '--time-source',
    'none',
    '--listen',
    `127.0.0.1:${port}`,
    '--metrics-listen',
    'off',
    ...extra,
  ]);
  await server.waitForLine(/"msg":"ready"/, 20_000);
  return server;
}
