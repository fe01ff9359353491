import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Finds `name` on `pathEnv` (default `process.env.PATH`); `undefined` when absent. */
export function findOnPath(name: string, pathEnv = process.env['PATH'] ?? ''): string | undefined {
  for (const dir of pathEnv.split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}
