import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from './net.js';
import { spawnProcess, type ProcessExit, type ProcessHandle } from './process.js';
import { tsNodeArgs } from './ts-node.js';

/** The workspace's node_modules: a README example imports `@idgen/<package>` as a user would, resolved there. */
const WORKSPACE_NODE_MODULES = join(__dirname, '..', '..', '..', 'node_modules');

/**
 * The first ```ts block of `readmePath`, which must open the README (come before its first `## ` section):
 * the example a package's README leads with (STYLE.md: "A README snippet that a test runs").
 */
export function readmeExample(readmePath: string): string {
  const readme = readFileSync(readmePath, 'utf8');
  const match = /^```ts\n([\s\S]*?)^```$/m.exec(readme);
  if (match?.[1] === undefined) throw new Error(`${readmePath} has no \`\`\`ts block`);
  const section = readme.indexOf('\n## ');
  if (section >= 0 && readme.indexOf('```ts') > section) {
    throw new Error(`${readmePath}: the \`\`\`ts example must open the README, before its first section`);
  }
  return match[1];
}

/**
 * Runs TypeScript `code` as a file of its own in a child process (ts-node, the workspace's packages on
 * NODE_PATH) with `env` added, and resolves when it ended, its temporary directory removed.
 */
export async function runTsExample(
  code: string,
  env: NodeJS.ProcessEnv = {},
): Promise<{ exit: ProcessExit; child: ProcessHandle }> {
  const dir = await tempDir('idgen-readme-');
  try {
    const file = join(dir.path, 'example.ts');
    writeFileSync(file, code);
    const child = spawnProcess(process.execPath, tsNodeArgs(file), {
      env: { ...process.env, NODE_PATH: WORKSPACE_NODE_MODULES, ...env },
    });
    return { exit: await child.exited, child };
  } finally {
    await dir.remove();
  }
}
