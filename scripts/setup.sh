#!/usr/bin/env bash
# Installs what Warren needs on this machine: npm packages from the lockfile (which bring Node 24)
# and, when running as root on Debian, the system packages the service uses. Safe to run again.
# --deps-only: npm packages only.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x node_modules/.bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "warren setup: installing npm packages from the lockfile" >&2
  npm ci --no-audit --no-fund --loglevel=error
fi
# The SDK (sdk/, its own package: its generator needs TypeScript 5, the repository has 7): the CLI
# and the tests use it from its sources.
if [ ! -d sdk/node_modules ] || [ sdk/package-lock.json -nt sdk/node_modules/.package-lock.json ]; then
  echo "warren setup: installing the SDK's npm packages from its lockfile" >&2
  npm ci --prefix sdk --ignore-scripts --no-audit --no-fund --loglevel=error
fi
# The web console (console/, its own package): built into console/dist, which the service serves at
# /console. Built again when its sources, its lockfile or the SDK it bundles are newer than the build.
if [ ! -d console/node_modules ] || [ console/package-lock.json -nt console/node_modules/.package-lock.json ]; then
  echo "warren setup: installing the console's npm packages from its lockfile" >&2
  npm ci --prefix console --ignore-scripts --no-audit --no-fund --loglevel=error
fi
if [ ! -f console/dist/index.html ] || [ -n "$(find console/src console/index.html console/vite.config.ts console/tsconfig.json console/package-lock.json sdk/src -newer console/dist/index.html -print -quit)" ]; then
  echo "warren setup: building the web console" >&2
  npm --prefix console run build --silent >/dev/null
fi
[ "${1:-}" = "--deps-only" ] && exit 0

# System packages: sandboxes (bubblewrap; perl-base loads their syscall filter), their networks (iproute2, nftables), repositories (git),
# the tests' self-signed webhook receivers (openssl), web_fetch inside the sandbox (curl), the
# headless browser (chromium, driven through playwright-core) that the browser tools and the
# preview tests use, and the watcher that tells what a command changed without walking the
# workspace (inotifywait, from inotify-tools).
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v perl >/dev/null 2>&1 || need+=(perl-base)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v git >/dev/null 2>&1 || need+=(git)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# The CLI's tests drive it through a real terminal.
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v inotifywait >/dev/null 2>&1 || need+=(inotify-tools)
# Each workspace's disk quota is a file system of its own (mke2fs, loop-mounted with mount).
command -v mke2fs >/dev/null 2>&1 || need+=(e2fsprogs)
# The image tests (test/registry.ts): a real OCI registry on loopback (docker-registry), images
# built offline from the apt mirror (mmdebstrap) and pushed by a real OCI client (skopeo).
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
# The registry's password file (bcrypt, which docker-registry's htpasswd auth reads) for the credentials tests.
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
# Unpacked image layers mark an opaque folder as overlayfs does, with an extended attribute (setfattr).
command -v setfattr >/dev/null 2>&1 || need+=(attr)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "warren setup: installing ${need[*]}" >&2
    apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "warren setup: missing system packages: ${need[*]}. Install them as root (apt-get install ${need[*]})." >&2
  fi
fi

# The browser tools' Chromium runs as the workspace's user, which could ptrace it (many kernels
# have no YAMA) and write what it says to the service. A binary its user may execute but not read
# is made non-dumpable by the kernel at exec: no PTRACE_ATTACH, no /proc/<pid>/mem. The crash
# handler headless Chromium always starts gets the same. dpkg-statoverride keeps the mode across
# the package's upgrades; an override already there (the operator's choice) is left alone.
browser_bins=(/usr/lib/chromium/chromium /usr/lib/chromium/chrome_crashpad_handler)
for bin in "${browser_bins[@]}"; do
  [ -f "$bin" ] || continue
  if [ "$(id -u)" = 0 ] && command -v dpkg-statoverride >/dev/null 2>&1; then
    dpkg-statoverride --list "$bin" >/dev/null || dpkg-statoverride --update --add root root 0711 "$bin"
  elif [ $(( 0$(stat -c %a "$bin") & 4 )) -ne 0 ]; then
    echo "warren setup: $bin is readable by workspaces, which could then ptrace the browser. As root: dpkg-statoverride --update --add root root 0711 $bin" >&2
  fi
done

# inotify limits, raised (never lowered) for the workspaces' watchers: one instance per workspace
# with a watcher, and one watch per folder of its tree (node_modules included: inotifywait filters
# its events, not its folders). Past a limit nothing is lost: a workspace whose watcher cannot start,
# or whose queue overflows (a burst of more writes than max_queued_events), is walked instead.
if [ "$(id -u)" = 0 ]; then
  for limit in max_user_instances=8192 max_user_watches=1048576; do
    f=/proc/sys/fs/inotify/${limit%%=*}
    want=${limit#*=}
    if [ -w "$f" ] && [ "$(cat "$f")" -lt "$want" ]; then echo "$want" > "$f" 2>/dev/null || true; fi
  done
fi
