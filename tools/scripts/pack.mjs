#!/usr/bin/env node
// Build and packaging steps of a published package, run from the package's directory:
//   clean     before the build: remove dist (tsc -b never deletes the output of a source file that is gone,
//             and Nx would cache that stale output)
//   markers   after the build: dist/esm/package.json {"type":"module"}, dist/cjs/package.json {"type":"commonjs"}
//   prepack   build afresh (through Nx, so dependencies build first), then write the manifest as published: without
//             the workspace-only `@idgen/source` export condition and the `nx` block (the scripts stay:
//             `npm publish` runs `postpublish` from the manifest it re-read). The
//             workspace manifest is kept beside it in `package.json.workspace`.
//   postpack  put the workspace manifest back (after `npm pack`; `npm publish` re-reads the manifest after
//             packing to send it to the registry, so there it is put back by `postpublish` instead).
//   restore   put the workspace manifest back whatever happened (for tests and failed publishes).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.cwd();
const manifestPath = join(dir, 'package.json');
const backupPath = join(dir, 'package.json.workspace');

function restore() {
  if (existsSync(backupPath)) renameSync(backupPath, manifestPath);
}

/** The `exports` map without the `@idgen/source` condition, at any depth. */
function published(exp) {
  if (exp === null || typeof exp !== 'object') return exp;
  return Object.fromEntries(
    Object.entries(exp)
      .filter(([k]) => k !== '@idgen/source')
      .map(([k, v]) => [k, published(v)]),
  );
}

const step = process.argv[2];
switch (step) {
  case 'clean':
    rmSync(join(dir, 'dist'), { recursive: true, force: true });
    break;
  case 'markers':
    for (const [sub, type] of [
      ['esm', 'module'],
      ['cjs', 'commonjs'],
    ]) {
      mkdirSync(join(dir, 'dist', sub), { recursive: true });
      writeFileSync(join(dir, 'dist', sub, 'package.json'), JSON.stringify({ type }) + '\n');
    }
    break;
  case 'prepack': {
    restore();
    const text = readFileSync(manifestPath, 'utf8');
    const manifest = JSON.parse(text);
    if (process.env.IDGEN_PACK_SKIP_BUILD !== '1') {
      execFileSync('npx', ['nx', 'run', `${manifest.name}:build`, '--output-style=static', '--skip-nx-cache'], {
        stdio: ['ignore', 'inherit', 'inherit'],
        env: { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true', NX_TUI: 'false' },
      });
    }
    const out = { ...manifest, exports: published(manifest.exports) };
    delete out.nx;
    writeFileSync(backupPath, text);
    writeFileSync(manifestPath, JSON.stringify(out, null, 2) + '\n');
    break;
  }
  case 'postpack':
    if (process.env.npm_command !== 'publish') restore();
    break;
  case 'postpublish':
  case 'restore':
    restore();
    break;
  default:
    console.error(`usage: pack.mjs clean|markers|prepack|postpack|postpublish|restore (got ${String(step)})`);
    process.exit(2);
}
