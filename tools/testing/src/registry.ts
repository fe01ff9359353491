import { rmSync } from 'node:fs';

/** Something the harness started that must not outlive the test file: a process or a temp directory. */
export interface Cleanable {
  /** Asynchronous, orderly cleanup (kill and wait, remove files). */
  cleanup(): Promise<void>;
  /** Last-resort synchronous cleanup for the process `exit` hook (SIGKILL, rmSync). */
  cleanupSync(): void;
}

const live = new Set<Cleanable>();
let hooked = false;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  // A failing or interrupted test file must not leave an etcd behind (preamble: never leave processes running).
  process.on('exit', () => {
    for (const item of live) {
      try {
        item.cleanupSync();
      } catch {
        // best effort at exit: nothing else can be done
      }
    }
    live.clear();
  });
}

/** Tracks `item` until it is cleaned up; returns a function that stops tracking it. */
export function track(item: Cleanable): () => void {
  hookExit();
  live.add(item);
  return () => live.delete(item);
}

/**
 * Kills every process and removes every temp directory the harness started in this process, even when a
 * test failed. Call it in `afterAll`. Errors are collected, not thrown one by one, so all of them get cleaned.
 */
export async function cleanupAll(): Promise<void> {
  const items = [...live];
  live.clear();
  const results = await Promise.allSettled(items.map((item) => item.cleanup()));
  const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed.length > 0) {
    throw new AggregateError(
      failed.map((f) => f.reason as unknown),
      `cleanupAll: ${failed.length} of ${items.length} cleanups failed`,
    );
  }
}

/** How many started processes / temp dirs are still tracked (for the harness's own tests). */
export function liveCount(): number {
  return live.size;
}

/** Removes a directory tree, ignoring a directory that is already gone. */
export function removeDirSync(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
