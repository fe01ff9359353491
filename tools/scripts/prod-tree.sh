#!/usr/bin/env bash
# The production tree of idgen-server, made one way for every install: deploy/Dockerfile's build stage, the runbook's
# systemd install (docs/runbook.md "Installing on a host (systemd)") and the spec that starts a node from it
# (tools/deploy-check/src/prod-tree.spec.ts) all run this script, so they cannot drift.
#
#   bash tools/scripts/prod-tree.sh DEST        (from a checkout, as the user who owns it; DEST e.g. /opt/idgen)
#
# In the checkout: `npm ci` (the lockfile, exactly), build the server and the packages it needs, then drop the
# development dependencies (`npm prune --omit=dev`). Into DEST: node_modules, packages, apps/server and
# deploy/wait-ready.mjs (replacing what an earlier install put there; DEST/node, the Node runtime of the systemd
# install, is left alone). Then checks that every runtime import of the server and of the workspace packages it
# loads resolves in DEST (tools/scripts/prod-tree-check.mjs): a tree that would die with MODULE_NOT_FOUND fails here,
# at build time. Why the runtime dependencies sit at the top of node_modules: docs/toolchain.md "The production tree".
# Needs Node 24 and npm first on the PATH, and the npm registry (or npm's cache) for `npm ci`.
set -euo pipefail
dest="${1:-}"
if [[ -z "$dest" ]]; then
  echo "usage: prod-tree.sh DEST   (e.g. /opt/idgen)" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
export NX_DAEMON=false NX_NO_CLOUD=true NX_TUI=false
say() { echo "prod-tree: $*" >&2; }

say "npm ci"
npm ci --no-audit --no-fund --ignore-scripts --prefer-offline
say "build @idgen/server"
npx nx run @idgen/server:build --output-style=static
say "npm prune --omit=dev"
npm prune --omit=dev --no-audit --no-fund --prefer-offline

say "copy into $dest"
mkdir -p "$dest/apps" "$dest/deploy"
rm -rf "$dest/node_modules" "$dest/packages" "$dest/apps/server"
cp -a node_modules packages "$dest/"
cp -a apps/server "$dest/apps/"
cp deploy/wait-ready.mjs "$dest/deploy/"
node tools/scripts/prod-tree-check.mjs "$dest"
