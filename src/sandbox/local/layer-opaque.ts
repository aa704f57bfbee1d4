import { execFile } from 'node:child_process'
import fs from 'node:fs'
import { filterArch } from './seccomp.ts'
import { syscallTable } from './syscall-table.ts'

/**
 * Which folders of a sandbox's layer (its overlay's upper folder) are opaque: overlayfs marks a
 * folder that hides the image's folder of that name (one removed and made again) with the
 * `trusted.overlay.opaque` attribute (`y`); the service mounts the overlay as root, so trusted.*,
 * not user.*. Node reads no extended attributes, so one perl process (perl-base, on every host
 * the sandboxes run on) reads them all: each folder opened from the layer's top one component at a
 * time with O_NOFOLLOW (openat), its attribute read through that descriptor (fgetxattr). The agent
 * may be changing the layer meanwhile: a folder swapped for a link is skipped, never followed.
 */
const SCRIPT = String.raw`
use strict;
my ($NR_openat, $NR_fgetxattr, $flags, $top) = @ARGV;
local $/ = "\0";
open(my $root, '<', $top) or die "cannot open the layer: $!\n";
while (my $rel = <STDIN>) {
  chomp $rel;
  my @fds = ();
  my $fd = fileno($root);
  my $ok = 1;
  for my $part (split m{/}, $rel) {
    my $next = syscall($NR_openat + 0, $fd + 0, $part, $flags + 0);
    if ($next < 0) { $ok = 0; last; }
    push @fds, $next; $fd = $next;
  }
  if ($ok && @fds) {
    my ($name, $buf) = ("trusted.overlay.opaque", "\0\0");
    my $n = syscall($NR_fgetxattr + 0, $fd + 0, $name, $buf, 2);
    print $rel, "\0" if $n == 1 && substr($buf, 0, 1) eq 'y';
  }
  POSIX::close($_) for @fds;
}
`

/**
 * The folders among `folders` (relative to `upper`) that are opaque. Rejects when it cannot tell
 * (no syscall table for this host, the layer gone, perl failing): a layer read without its opaque
 * marks would show, packed or read for its users, what the agent removed.
 */
export async function opaqueFolders(upper: string, folders: string[]): Promise<string[]> {
  if (folders.length === 0) return []
  const arch = filterArch()
  if (!arch) throw new Error(`no syscall table for ${process.arch}: the layer's opaque folders cannot be read`)
  const table = syscallTable(arch)
  const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = fs.constants
  const args = ['-MPOSIX', '-e', SCRIPT, String(table.indexOf('openat')), String(table.indexOf('fgetxattr')), String(O_RDONLY | O_DIRECTORY | O_NOFOLLOW | 0o2000000), upper]
  const out = await new Promise<string>((resolve, reject) => {
    const child = execFile('perl', args, { maxBuffer: 64 * 1024 * 1024, env: { PATH: '/usr/bin:/bin' } }, (err, stdout) => (err ? reject(err) : resolve(stdout)))
    // perl may end before it has read them all (the layer gone): the write's EPIPE is that
    // failure, which the exit reports, not an error of the service's own to crash on.
    child.stdin!.on('error', () => {})
    child.stdin!.end(folders.filter((f) => !f.includes('\0')).join('\0') + '\0')
  })
  return out.split('\0').filter(Boolean)
}
