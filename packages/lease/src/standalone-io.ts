import { link, mkdir, open, readFile, readdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';

/** The part of a `node:fs/promises` file handle the standalone lease writes through. */
export interface StandaloneFileHandle {
  writeFile(data: string): Promise<void>;
  sync(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The file operations of the standalone lease and its lock: `node:fs/promises` ({@link nodeStandaloneIo}); a test
 * wraps it to watch or break the write path.
 */
export interface StandaloneIo {
  open(path: string, flags: 'w' | 'r', mode?: number): Promise<StandaloneFileHandle>;
  rename(from: string, to: string): Promise<void>;
  /** Creates `to` as a second name of `from`; fails with EEXIST when `to` exists (what makes the lock exclusive). */
  link(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  readFile(path: string): Promise<string>;
  readdir(path: string): Promise<string[]>;
  mkdirs(path: string): Promise<void>;
  /** The last modification time of `path` (ms since the epoch, the file system's clock), or `undefined` if absent. */
  mtimeMs(path: string): Promise<number | undefined>;
}

export const nodeStandaloneIo: StandaloneIo = Object.freeze({
  open: (path: string, flags: 'w' | 'r', mode?: number) => open(path, flags, mode),
  rename,
  link,
  unlink,
  readFile: (path: string) => readFile(path, 'utf8'),
  readdir: (path: string) => readdir(path),
  mkdirs: async (path: string) => {
    await mkdir(path, { recursive: true, mode: 0o700 });
  },
  mtimeMs: async (path: string) => {
    try {
      return (await stat(path)).mtimeMs;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw e;
    }
  },
});

/** Writes `data` to a new file `path` (mode 600) and fsyncs it before closing; removes it if that fails. */
export async function writeSynced(io: StandaloneIo, path: string, data: string): Promise<void> {
  const fh = await io.open(path, 'w', 0o600);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } catch (e) {
    await fh.close().catch(() => undefined);
    await io.unlink(path).catch(() => undefined);
    throw e;
  }
  await fh.close();
}

/**
 * fsyncs a directory, so a rename or link in it survives a power loss. Windows cannot open a directory: skipped there
 * (NTFS journals its metadata).
 */
export async function syncDir(io: StandaloneIo, dir: string): Promise<void> {
  if (process.platform === 'win32') return;
  const fh = await io.open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Replaces `path` with `data` so that after a crash or a power loss it holds the old content or the new, never a part
 * or nothing: write a temporary file `tmp` in the same directory, fsync it, rename it over `path`, fsync the
 * directory. `beforeRename` runs between the fsync and the rename and may veto by throwing (the temporary file is
 * removed and `path` keeps its old content).
 */
export async function replaceDurably(
  io: StandaloneIo,
  path: string,
  tmp: string,
  data: string,
  beforeRename: () => Promise<void> = async () => undefined,
): Promise<void> {
  await writeSynced(io, tmp, data);
  try {
    await beforeRename();
    await io.rename(tmp, path);
  } catch (e) {
    await io.unlink(tmp).catch(() => undefined);
    throw e;
  }
  await syncDir(io, dirname(path));
}
