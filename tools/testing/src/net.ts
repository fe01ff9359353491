import { mkdtempSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeDirSync, track } from './registry.js';

/**
 * A free TCP port on 127.0.0.1, found by listening on port 0 and closing again. Another process could take
 * it in between; tests use fresh ports per run so parallel test files do not collide on fixed ones.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('freePort: the listener has no TCP address'));
        return;
      }
      const port = address.port;
      server.close(() => resolve(port));
    });
  });
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
