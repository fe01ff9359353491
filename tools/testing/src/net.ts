import { mkdtempSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeDirSync, track } from './registry.js';

/**
 * Where test ports come from: below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768
 * on Linux by default), from 10000 up, one block per Jest worker (`JEST_WORKER_ID`). A port from `listen(0)` comes
 * from the ephemeral range, so any outgoing connection (an etcd client, a peer link) could take it between the check
 * and the child's bind, and two test files running at once could be handed the same one: CI saw etcd exit with
 * "address already in use" on its first start when the lease specs ran three files at a time.
 */
const PORT_BASE = 10_000;
const PORT_BLOCKS = 16;
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > PORT_BASE + PORT_BLOCKS * 64 ? low : 32_768;
  } catch {
    return 32_768; // not Linux: the IANA dynamic range starts at 49152, so this is below it too
  }
}
const PORT_BLOCK_SIZE = Math.floor((ephemeralLow() - PORT_BASE) / PORT_BLOCKS);
const PORT_BLOCK_START =
  PORT_BASE + ((Number(process.env['JEST_WORKER_ID'] ?? 0) || 0) % PORT_BLOCKS) * PORT_BLOCK_SIZE;
// A random place in the block, so two runs on one machine (or two tools outside Jest) rarely start at the same port.
let nextPortOffset = Math.floor(Math.random() * PORT_BLOCK_SIZE);

function listensFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A free TCP port on 127.0.0.1 that this process has not handed out lately: the next one in this worker's block
 * (see {@link PORT_BASE}) that a listen on it shows free. Another process could still take it in between (a test
 * binding it outside this scheme); a restart on a taken port is retried (`etcd.ts`).
 */
export async function freePort(): Promise<number> {
  for (let tried = 0; tried < PORT_BLOCK_SIZE; tried++) {
    const port = PORT_BLOCK_START + (nextPortOffset++ % PORT_BLOCK_SIZE);
    if (await listensFree(port)) return port;
  }
  throw new Error(`freePort: no free port in ${PORT_BLOCK_START}-${PORT_BLOCK_START + PORT_BLOCK_SIZE - 1}`);
}

/** A temporary directory. */
export interface TempDir {
  readonly path: string;
  /** Removes the directory and everything in it; safe to call twice. */
  remove(): Promise<void>;
}

/**
 * Creates a temporary directory with mode 700 (etcd refuses a data dir readable by others), tracked so
 * `cleanupAll()` or process exit removes it.
 */
export async function tempDir(prefix: string): Promise<TempDir> {
  const path = await mkdtemp(join(tmpdir(), `${prefix.replace(/[^A-Za-z0-9_.-]/g, '-')}-`));
  return trackDir(path);
}

/** Synchronous {@link tempDir}, for setup code that cannot await. */
export function tempDirSync(prefix: string): TempDir {
  const path = mkdtempSync(join(tmpdir(), `${prefix.replace(/[^A-Za-z0-9_.-]/g, '-')}-`));
  return trackDir(path);
}

function trackDir(path: string): TempDir {
  // mkdtemp already creates the directory 0700
  const untrack = track({
    cleanup: () => rm(path, { recursive: true, force: true }),
    cleanupSync: () => removeDirSync(path),
  });
  return {
    path,
    async remove() {
      untrack();
      await rm(path, { recursive: true, force: true });
    },
  };
}
