#!/usr/bin/env bash
# Runs the whole suite on the project's Node 24, two files at a time (the machine has 2 cores).
# The setup comes first, system packages included: on a fresh machine the sandbox, network and
# browser tests need bubblewrap, nftables and Chromium as much as the service does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
files=$(find test src -name '*.test.ts' | sort)
exec node_modules/.bin/node --test --test-concurrency=2 --test-timeout=120000 $files
