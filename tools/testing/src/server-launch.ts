import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { shebangNodeFlags } from './process.js';

/**
 * The argv (after `node`) that starts the built generator node `serverMain` (`…/apps/server/dist/main.js`) the
 * way its command does: the Node flags of `…/apps/server/bin/idgen-server.js`'s first line, then `serverMain`.
 * Tests, benchmarks and chaos start the node with it, so they measure the runtime production runs.
 */
export function serverLaunchArgs(serverMain: string): string[] {
  const bin = join(dirname(serverMain), '..', 'bin', 'idgen-server.js');
  if (!existsSync(bin))
    throw new Error(`${bin} is missing: the server's command holds its launch flags (next to ${serverMain})`);
  return [...shebangNodeFlags(bin), serverMain];
}
