#!/usr/bin/env bash
# Runs the whole suite on the project's Node 24, two files at a time (the machine has 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x node_modules/.bin/node ] || bash scripts/setup.sh --deps-only
files=$(find test src -name '*.test.ts' | sort)
exec node_modules/.bin/node --test --test-concurrency=2 --test-timeout=120000 $files
