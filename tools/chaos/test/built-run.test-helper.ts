/**
 * What the end-to-end chaos specs share: the built `npm run chaos` (tools/chaos/dist/main.js) run to its end with the
 * spec's flags in a temporary directory, its report printed, its `report.json` read. The built server, CLI and chaos
 * tool must exist (each spec's test target builds them); a missing one fails the spec, naming the build command.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnProcess, tempDir, type ProcessExit, type TempDir } from '@idgen/testing';

const ROOT = join(__dirname, '..', '..', '..');
const CHAOS_MAIN = join(ROOT, 'tools/chaos/dist/main.js');
const NEEDED = [CHAOS_MAIN, join(ROOT, 'apps/server/dist/main.js'), join(ROOT, 'apps/cli/dist/main.js')];

export interface BuiltRun<R> {
  readonly dir: TempDir;
  /** The run's `--out` directory. */
  readonly out: string;
  readonly pid: number;
  readonly exit: ProcessExit;
  /** report.txt (or the run's last output when it wrote none). */
  readonly text: string;
  /** report.json, parsed as the spec's own view of it. */
  report(): Promise<R>;
}

/** Runs the built chaos tool with `args` (its `--out` added) to its end, and prints its report. */
export async function runBuiltChaos<R>(name: string, args: readonly string[]): Promise<BuiltRun<R>> {
  for (const f of NEEDED)
    if (!existsSync(f))
      throw new Error(`${f} is missing: build it (npx nx run-many -t build -p @idgen/chaos @idgen/server @idgen/cli)`);
  const dir = await tempDir(name);
  const out = join(dir.path, 'run');
  const run = spawnProcess(process.execPath, [CHAOS_MAIN, ...args, '--out', out]);
  const exit = await run.exited;
  const text = existsSync(join(out, 'report.txt')) ? await readFile(join(out, 'report.txt'), 'utf8') : run.tail(60);
  process.stdout.write(`${text}\n`);
  return {
    dir,
    out,
    pid: run.pid,
    exit,
    text,
    report: async () => JSON.parse(await readFile(join(out, 'report.json'), 'utf8')) as R,
  };
}
