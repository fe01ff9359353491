// Integration-test support for the CLI: real `idgen-server` processes (the BUILT server, started as a
// process: an app never imports another app) on a real etcd, and the BUILT `idgen` binary run as a child.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { serverLaunchArgs, spawnProcess, type ProcessHandle } from '@idgen/testing';

/** The compiled server the tests start (the CLI's test target depends on @idgen/server:build). */
export const SERVER_MAIN_JS = join(__dirname, '..', '..', 'server', 'dist', 'main.js');
/** The CLI's bin (runs `dist/main.js`; the test target depends on the CLI's build). */
export const IDGEN_BIN = join(__dirname, '..', 'bin', 'idgen.js');

/** A running `idgen-server`. */
export interface ServerNode {
  readonly process: ProcessHandle;
  readonly nodeId: string;
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** Waits for the `ready` log line. */
  ready(timeoutMs?: number): Promise<void>;
}

/**
 * Starts `idgen-server` on a free port in `region` on etcd, holding only slot `worker` (so tests know which
 * slot is whose), with no clock check (there is no chrony here) and no metrics listener.
 */
export async function startNode(
  etcdUrl: string,
  o: { region: number; worker: number; nodeId: string; ttlSeconds: number; env?: NodeJS.ProcessEnv },
): Promise<ServerNode> {
  if (!existsSync(SERVER_MAIN_JS))
    throw new Error(`${SERVER_MAIN_JS} is missing: build it (npx nx run @idgen/server:build)`);
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('IDGEN_')) env[k] = v;
  Object.assign(env, o.env);
  const proc = spawnProcess(
    process.execPath,
    [
      ...serverLaunchArgs(SERVER_MAIN_JS),
      '--etcd',
      etcdUrl,
      '--status-details',
      'full',
      '--region',
      String(o.region),
      '--workers',
      String(o.worker),
      '--node-id',
      o.nodeId,
      '--lease-ttl',
      String(o.ttlSeconds),
      '--time-source',
      'none',
      '--listen',
      '127.0.0.1:0',
      '--metrics-listen',
      'off',
    ],
    { env },
  );
  const open = JSON.parse(await proc.waitForLine(/"msg":"serving port open/, 15_000)) as { listen?: string };
  const port = Number(
    String(open.listen ?? '')
      .split(':')
      .pop(),
  );
  return {
    process: proc,
    nodeId: o.nodeId,
    url: `http://127.0.0.1:${port}`,
    async ready(timeoutMs = 20_000) {
      await proc.waitForLine(/"msg":"ready"/, timeoutMs);
    },
  };
}

/** What one run of `idgen` printed and its exit code. */
export interface IdgenRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the built `idgen` with `args` (and `input` on stdin); never rejects; killed after 30 s. */
export function idgen(args: readonly string[], input?: string): Promise<IdgenRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [IDGEN_BIN, ...args], { stdio: ['pipe', 'pipe', 'pipe'], timeout: 30_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

/** Runs `idgen … --json` and parses its stdout. */
export async function idgenJson<T>(args: readonly string[]): Promise<{ code: number | null; json: T; stderr: string }> {
  const r = await idgen([...args, '--json']);
  let json: T;
  try {
    json = JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`idgen ${args.join(' ')} --json printed no JSON (exit ${r.code}): ${r.stdout}${r.stderr}`);
  }
  return { code: r.code, json, stderr: r.stderr };
}

/** Polls `check` every 100 ms until it returns true; rejects naming `what` after `timeoutMs`. */
export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const start = Date.now();
  for (;;) {
    if (await check()) return;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
