#!/usr/bin/env node
// The import-cycle check of every project's `lint` target (nx.json), run in the project's directory: dpdm over its
// TypeScript, specs and tests included, exit 1 on any circle. Type-only imports count: two files whose types import
// each other cannot be read or moved apart either (docs/style.md "Layers": contracts in a leaf file).
// A project listed in KNOWN_CIRCLES is checked and its circles printed, but they do not fail the step: each entry
// is a known exception in docs/style.md, to be split, never added to.
import { spawnSync } from 'node:child_process';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const KNOWN_CIRCLES = new Map([
  ['tools/chaos', "run.ts keeps the run's option and result types, which the run's own parts import back"],
]);

const project = relative(root, process.cwd()).split('\\').join('/');
const dpdm = join(root, 'node_modules', '.bin', 'dpdm');
const args = ['--no-warning', '--no-tree', '--no-progress', '--exit-code', 'circular:1'];
const run = spawnSync(dpdm, [...args, '--exclude', '(node_modules|dist)/', '**/*.ts'], {
  encoding: 'utf8',
  env: { ...process.env, FORCE_COLOR: '0', NO_COLOR: '1' },
});
if (run.error !== undefined) {
  console.error(`import-cycles: cannot run dpdm (${run.error.message}): run npm ci`);
  process.exit(2);
}
// Colours stripped: under Nx the output may be coloured whatever the environment says.
const circles = run.stdout
  .replace(/\u001b\[[0-9;]*m/g, '')
  .split('\n')
  .filter((l) => /^\s+\d+\) /.test(l));
if (run.status === 0) {
  console.log(`import-cycles: ${project}: no circle`);
} else if (KNOWN_CIRCLES.has(project)) {
  console.log(`import-cycles: ${project}: ${circles.length} known circle(s), ${KNOWN_CIRCLES.get(project)}:`);
  console.log(circles.join('\n'));
} else {
  console.error(`import-cycles: ${project}: ${circles.length} circle(s) among its imports (docs/style.md "Layers"):`);
  console.error(circles.length > 0 ? circles.join('\n') : run.stdout + run.stderr);
  process.exit(1);
}
