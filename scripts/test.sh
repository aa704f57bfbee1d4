#!/usr/bin/env bash
# Runs the whole suite on the project's Node 24, two files at a time (the machine has 2 cores).
# The setup comes first, system packages included: on a fresh machine the sandbox, network and
# browser tests need bubblewrap, nftables and Chromium as much as the service does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# V8's compile cache, TypeScript's stripped output included, kept between processes: the suite
# starts a few hundred Node processes (a file each, services, CLI commands), and each spent about
# 2.1 s of CPU loading the service's modules, 1.4 s with the cache.
export NODE_COMPILE_CACHE="${NODE_COMPILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warren/node-compile}"
files=$(find test src -name '*.test.ts' | sort)
exec node_modules/.bin/node --test --test-concurrency=2 --test-timeout=120000 $files
