// Checks a production tree (tools/scripts/prod-tree.sh DEST): every runtime dependency and required peer of
// apps/server and of every workspace package it loads (following @idgen/* dependencies) resolves from that package's
// own directory the way Node resolves it (its node_modules, then each parent's, up to DEST). A peer counts: the
// serving and client packages import @connectrpc/* and @opentelemetry/api as peers, which the tree must hold where
// they can see it. Prints one line per missing module and exits 1; prints a summary line and exits 0 otherwise.
// Usage: node tools/scripts/prod-tree-check.mjs DEST
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const dest = process.argv[2];
if (dest === undefined) {
  process.stderr.write('usage: prod-tree-check.mjs DEST\n');
  process.exit(2);
}
const root = resolve(dest);

/** The directory Node finds `name` in, looking up from `from` (a package's real directory), or undefined. */
function find(name, from) {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name, 'package.json');
    if (existsSync(candidate)) return dirname(realpathSync(candidate));
    if (dir === root || dirname(dir) === dir) return undefined;
  }
}

const missing = [];
const seen = new Set();
const queue = [join(root, 'apps', 'server')];
while (queue.length > 0) {
  const dir = queue.shift();
  if (seen.has(dir)) continue;
  seen.add(dir);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const optionalPeers = new Set(
    Object.entries(pkg.peerDependenciesMeta ?? {})
      .filter(([, meta]) => meta?.optional === true)
      .map(([name]) => name),
  );
  const names = [
    ...Object.keys(pkg.dependencies ?? {}),
    ...Object.keys(pkg.peerDependencies ?? {}).filter((n) => !optionalPeers.has(n)),
  ];
  for (const name of names) {
    const found = find(name, dir);
    if (found === undefined) {
      missing.push(`${pkg.name} (${relative(root, dir)}) cannot resolve ${name}`);
      continue;
    }
    // Workspace packages are followed: what they import is loaded too.
    if (name.startsWith('@idgen/')) queue.push(found);
  }
}
if (missing.length > 0) {
  for (const line of missing) process.stderr.write(`prod-tree-check: ${line}\n`);
  process.stderr.write(
    `prod-tree-check: ${missing.length} runtime import(s) would fail with MODULE_NOT_FOUND in ${root}\n`,
  );
  process.exit(1);
}
process.stderr.write(`prod-tree-check: ${seen.size} packages' runtime imports resolve in ${root}\n`);
