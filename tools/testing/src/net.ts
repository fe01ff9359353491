import { mkdirSync, mkdtempSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeDirSync, track } from './registry.js';

/**
 * Where test ports come from: below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768
 * on Linux by default), from 10000 up, each one reserved machine-wide before it is handed out. A port from
 * `listen(0)` comes from the ephemeral range, so any outgoing connection (an etcd client, a peer link) could take it
 * between the check and the child's bind; and two test processes (Jest workers, projects run side by side, or two
 * runs on one machine) could be handed the same one by the kernel: CI saw etcd exit with "address already in use" on
 * its first start when the lease specs ran three files at a time.
 */
const PORT_BASE = 10_000;
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > PORT_BASE + 1_000 ? low : 32_768;
  } catch {
    return 32_768; // not Linux: the IANA dynamic range starts at 49152, so this is below it too
  }
}
const PORT_RANGE = ephemeralLow() - PORT_BASE;
/**
 * One file per reserved port (`wx`: created by exactly one process). A reservation is needed only from the hand-out
 * to the child's bind (seconds): after that the listen check sees the port taken. So one older than this is free to
 * take again, and nothing needs to remove them.
 */
const RESERVATIONS = join(tmpdir(), 'idgen-test-ports');
const RESERVATION_MS = 120_000;
// A random place in the range, so processes started together do not walk the same ports in step.
let nextPortOffset = Math.floor(Math.random() * PORT_RANGE);

function reserve(port: number): boolean {
  const file = join(RESERVATIONS, String(port));
  try {
    writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
      mkdirSync(RESERVATIONS, { recursive: true });
      return reserve(port);
    }
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  try {
    if (Date.now() - statSync(file).mtimeMs < RESERVATION_MS) return false;
    unlinkSync(file); // stale: its holder bound the port long ago (the listen check decides) or never will
  } catch {
    return false; // another process took it over meanwhile
  }
  try {
    writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
    return true;
  } catch {
    return false;
  }
}

function listensFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A free TCP port on 127.0.0.1 that no test process on this machine was handed in the last two minutes: the next one
 * (see {@link PORT_BASE}) this process could reserve and a listen on shows free. A process outside this scheme could
 * still take it in between; a restart on a taken port is retried (`etcd.ts`).
 */
export async function freePort(): Promise<number> {
  for (let tried = 0; tried < PORT_RANGE; tried++) {
    const port = PORT_BASE + (nextPortOffset++ % PORT_RANGE);
    if (reserve(port) && (await listensFree(port))) return port;
  }
  throw new Error(`freePort: no free port in ${PORT_BASE}-${PORT_BASE + PORT_RANGE - 1}`);
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
export function tempDirSync(prefix: string, parent: string = tmpdir()): TempDir {
  const path = mkdtempSync(join(parent, `${prefix.replace(/[^A-Za-z0-9_.-]/g, '-')}-`));
  return trackDir(path);
}

function trackDir(path: string): TempDir {
  // mkdtemp already creates the directory 0700
  const untrack = track({
    // Retried (ENOTEMPTY, EBUSY): a process stopped a moment ago may still be renaming a file into the directory.
    cleanup: () => rm(path, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 }),
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
