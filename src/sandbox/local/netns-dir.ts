import { mkdir } from 'node:fs/promises'
import { run, runQuiet } from './net-exec.ts'

/** iproute2's NETNS_RUN_DIR: `ip netns add` bind-mounts each namespace on a file in it. */
export const NETNS_DIR = '/run/netns'

/**
 * Makes NETNS_DIR a shared mount, as `ip netns add` does on first use (a bind onto itself when it
 * is no mount yet). It must be one before any shell parks in a mount namespace of its own (see
 * parkInit): a copy taken while it was a plain folder, or a private mount, never receives the
 * namespace mounts made later, and `ip netns exec` in it then opens an empty file ("setting the
 * network namespace … failed: Invalid argument"). On a fresh boot nothing has made it one yet.
 */
export async function shareNetnsDir(): Promise<void> {
  await mkdir(NETNS_DIR, { recursive: true, mode: 0o755 })
  // Fails (EINVAL) only when the folder is no mount point.
  if (await runQuiet('mount', ['--make-rshared', NETNS_DIR])) return
  await run('mount', ['--bind', NETNS_DIR, NETNS_DIR])
  await run('mount', ['--make-rshared', NETNS_DIR])
}
