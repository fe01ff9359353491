#!/usr/bin/env bash
# The root `npm test`: formatting, then build, lint and type-check, then every project's specs, then one closing line
# over them all (tools/scripts/test-summary.mjs), which names every failed test. A failing step does not stop the
# next (every failure is reported in one run); the exit status is non-zero if any failed.
#
# On this kind of machine (2 cores) most projects' specs wait on real processes (etcd TTLs, lease deadlines, server
# starts) far more than they compute, so three projects run side by side, @idgen/server's integration suites among
# them; the node's suites that load the machine themselves (abuse, fuzzing, h2spec: apps/server/jest.load-suites.js)
# run alone, last (target test-load). Ports come from
# @idgen/testing's freePort, which reserves each one machine-wide, so projects side by side never share one.
# Each step prints when it starts, so a slow run says where its time went.
set -uo pipefail
cd "$(dirname "$0")/../.."
rm -rf .jest-results
npx prettier --check . || exit 1
status=0
step() { echo "test.sh: $(date -u +%H:%M:%S) $*"; }
step build, lint, typecheck
npx nx run-many -t build lint typecheck --parallel=2 --output-style=stream || status=1
step specs of every project, three at a time, but the node load suites
npx nx run-many -t test --parallel=3 --output-style=stream || status=1
step the node load suites, alone
npx nx run @idgen/server:test-load --output-style=stream || status=1
step done
node tools/scripts/test-summary.mjs || status=1
exit "$status"
