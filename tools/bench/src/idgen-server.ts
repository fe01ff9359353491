import { execFileSync } from 'node:child_process';
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
 * Starts one standalone node on `127.0.0.1:port` (no etcd, no chrony, no metrics listener: what is
 * measured is the serving path) and resolves once it logs `ready`. `extra`: more flags; `launchFlags: false`
 * starts it without the Node flags its command carries (V8's defaults).
 */
export async function startIdgenServer(
  port: number,
  extra: readonly string[] = [],
  o: { launchFlags?: boolean } = {},
): Promise<ProcessHandle> {
  const server = spawnProcess(process.execPath, [
    ...(o.launchFlags === false ? [SERVER_MAIN] : serverLaunchArgs(SERVER_MAIN)),
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
