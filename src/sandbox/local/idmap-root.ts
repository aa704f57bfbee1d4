import { filterArch } from './seccomp.ts'
import { syscallTable } from './syscall-table.ts'

/**
 * Root inside a sandbox on an image: uid 0 of its user namespace is host uid `base` of a range of
 * ROOT_RANGE_SIZE uids that belong to that sandbox alone (see the provider's root ranges).
 *
 * The image's layers are the node's, owned by host uids 0…65535, and shared: they are not
 * chowned. Each is bound, in the init's private mount namespace, through an idmapped mount that
 * shows host uid n as `base + n`, so that the sandbox's root owns the image's root-owned files
 * (and its `_apt` its files) while the cache on disk stays as pulled; the overlay is made of those
 * binds. The workspace is bound the same way showing its owner (the workspace's own host uid, as on
 * the host's system) as `base`: the agent's root owns the workspace inside, and what it writes there
 * lands on disk owned by the workspace's uid, as every reader of the workspace expects. The
 * sandbox's own layer (upper) is not idmapped: what the agent makes there is owned on the host by
 * `base + n`, an unprivileged uid of its range.
 *
 * An idmapped mount takes its mapping from a user namespace; the helper makes two that live only
 * while it runs (a child unshares, the helper, root on the host, writes the maps, keeps the
 * namespace's file open, lets the child exit).
 */

export const ROOT_RANGE_SIZE = 65_536

/**
 * Capabilities of the sandbox's root, each over its own namespaces only (the user namespace owns
 * nothing outside them). Docker's default set without MKNOD (a device node made in a user
 * namespace cannot be opened: its mounts are nodev), NET_RAW (raw sockets past the egress proxy's
 * walls would only reach the namespace's own veth, and nothing needs them to install packages) and
 * AUDIT_WRITE (no audit in a user namespace). What they are for: CHOWN, FOWNER, FSETID and
 * DAC_OVERRIDE for package managers writing and owning files across the image's users; SETUID and
 * SETGID for tools that drop to their own user (apt's `_apt`, su); SETPCAP to drop capabilities
 * from children; SETFCAP to install binaries with file capabilities (in the namespace only: v3
 * file capabilities name the namespace's root); KILL for signals across the sandbox's own users;
 * NET_BIND_SERVICE for servers on low ports in its own network namespace; SYS_CHROOT for build
 * tools that chroot into a folder of the sandbox.
 */
export const ROOT_CAPS = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'SETUID', 'SETGID', 'SETPCAP', 'SETFCAP', 'KILL', 'NET_BIND_SERVICE', 'SYS_CHROOT']

/**
 * `uid_map`/`gid_map` text of a sandbox whose root is host uid `base`; `own`, the sandbox's own host
 * uid that bubblewrap runs as (it sets the sandbox up as that uid before it becomes root inside, and
 * an unmapped uid may create nothing), is mapped just past the range.
 */
export const rootMap = (base: number, own: number) => `0 ${base} ${ROOT_RANGE_SIZE}\n${ROOT_RANGE_SIZE} ${own} 1\n`

// Every step of a start is paid by the sandbox's create: no perl module loaded (POSIX alone more
// than doubled perl's start), the two user namespaces made at once (each a fork and two switches
// between processes, which a loaded machine makes slow), the overlay mounted by mount(2) rather than
// a mount(8) started for it.
const SCRIPT = String.raw`
my ($NR_unshare, $NR_open_tree, $NR_mount_setattr, $NR_move_mount, $NR_mount, $NR_close, $NR_exit_group, $base, $size, $owner, $wsUid, $wsGid, $overlay, $stage, $wsDir, $wsMount, @lowers) = @ARGV;
sub child {
  pipe(my $r, my $w) or die "pipe: $!"; pipe(my $r2, my $w2) or die "pipe: $!";
  my $pid = fork(); die "fork: $!" unless defined $pid;
  if ($pid == 0) { close $r; close $w2; syscall($NR_unshare + 0, 0x10000000) == 0 or syscall($NR_exit_group + 0, 1); syswrite($w, 'u'); sysread($r2, my $b, 1); syscall($NR_exit_group + 0, 0); }
  close $w; close $r2;
  return [$pid, $r, $w2];
}
sub userns {
  my ($child, $map, $gmap) = @_;
  $gmap //= $map;
  my ($pid, $r, $w2) = @$child;
  sysread($r, my $b, 1) == 1 or die "no user namespace for an idmapped mount";
  for my $f (['uid_map', $map], ['gid_map', $gmap]) { open(my $m, '>', "/proc/$pid/$f->[0]") or die "$f->[0]: $!"; syswrite($m, $f->[1]) or die "$f->[0]: $!"; close($m) or die "$f->[0]: $!"; }
  open(my $ns, '<', "/proc/$pid/ns/user") or die "user namespace: $!";
  # Told by a byte, not the pipe's end: the other child holds a copy of this end.
  syswrite($w2, 'g'); close $w2; waitpid($pid, 0);
  return $ns;
}
sub bind_idmapped {
  my ($ns, $src, $dst) = @_;
  my $fd = syscall($NR_open_tree + 0, -100, $src, 1 | 0x80000);
  die "open_tree $src: $!" if $fd < 0;
  my $attr = pack('QQQQ', 0x00100000, 0, 0, fileno($ns)); my $e = '';
  syscall($NR_mount_setattr + 0, $fd, $e, 0x1000, $attr, length $attr) == 0 or die "idmapping $src: $!";
  my $e2 = '';
  syscall($NR_move_mount + 0, $fd, $e2, -100, $dst, 4) == 0 or die "binding $src: $!";
  syscall($NR_close + 0, $fd);
}
my @children = (child(), child());
my $image = userns($children[0], "0 $base $size\n");
while (@lowers) { my ($src, $dst) = splice(@lowers, 0, 2); bind_idmapped($image, $src, $dst); }
# syscall() takes strings it may write to: variables, not literals.
my ($source, $type) = ('overlay', 'overlay');
syscall($NR_mount + 0, $source, $stage, $type, 0, $overlay) == 0 or die "mounting the overlay failed: $!";
bind_idmapped(userns($children[1], "$owner " . ($base + $wsUid) . " 1\n", "$owner " . ($base + $wsGid) . " 1\n"), $wsDir, "$stage$wsMount");
`

/**
 * The command the init's parked shell runs (as root, in its private mount namespace) before
 * bubblewrap: the image's layers idmapped onto `lowers[i].dst`, the overlay of those on `stage`,
 * the workspace idmapped into it at `workspaceMount`.
 */
export function idmapRootArgv(o: {
  perl: string
  base: number
  /** The workspace folder's host owner (its uid and gid). */
  owner: number
  overlay: string
  stage: string
  workspaceDir: string
  workspaceMount: string
  lowers: Array<{ src: string; dst: string }>
  /** Who the workspace's owner is shown as inside: its root, or the image's User its commands run as. */
  user: { uid: number; gid: number }
}): string[] {
  const arch = filterArch()
  if (!arch) throw new Error(`no syscall table for ${process.arch}`)
  const table = syscallTable(arch)
  const nr = ['unshare', 'open_tree', 'mount_setattr', 'move_mount', 'mount', 'close', 'exit_group'].map((n) => String(table.indexOf(n)))
  return [o.perl, '-e', SCRIPT, ...nr, String(o.base), String(ROOT_RANGE_SIZE), String(o.owner), String(o.user.uid), String(o.user.gid), o.overlay, o.stage, o.workspaceDir, o.workspaceMount, ...o.lowers.flatMap((l) => [l.src, l.dst])]
}

/** Capability numbers (linux/capability.h) of ROOT_CAPS. */
const CAP_NUMBERS: Record<string, number> = { CHOWN: 0, DAC_OVERRIDE: 1, FOWNER: 3, FSETID: 4, KILL: 5, SETGID: 6, SETUID: 7, SETPCAP: 8, NET_BIND_SERVICE: 10, SYS_CHROOT: 18, SETFCAP: 31 }

// No module loaded (POSIX, strict): each costs the startup of every shell parked for a command, and
// POSIX alone more than doubled it (26 against 10 ms of CPU here). Syscalls by number instead.
const ENTER = String.raw`
my ($pid, $NR_setns, $NR_prctl, $NR_setgroups, $NR_setresgid, $NR_setresuid, $NR_exit_group, $keep, $uid, $gid, $ctl) = splice(@ARGV, 0, 11);
# The cgroups to join first (a parked shell's: see enterRootArgv), as the host shell that parks one
# would: a failure said on the control fd, exit 125.
while ($ARGV[0] ne '--') {
  my $procs = shift; my $p;
  next if open($p, '>', $procs) && syswrite($p, "$$\n") && close($p);
  my $why = "$procs: $!\n"; my $c;
  open($c, '>&=', $ctl) && syswrite($c, $why); syscall($NR_exit_group + 0, 125);
}
shift;
my @cmd = @ARGV;
my %keep = map { $_ => 1 } split(/,/, $keep);
my @order = (['net', 0x40000000], ['user', 0x10000000], ['mnt', 0x00020000], ['pid', 0x20000000], ['ipc', 0x08000000], ['uts', 0x04000000]);
my %fh;
for my $ns (@order) { open($fh{$ns->[0]}, '<', "/proc/$pid/ns/$ns->[0]") or die "nsenter: $ns->[0]: $!\n"; }
opendir(my $root, "/proc/$pid/root") or die "nsenter: root: $!\n";
for my $ns (@order) {
  syscall($NR_setns + 0, fileno($fh{$ns->[0]}), $ns->[1]) == 0 or die "nsenter: setns $ns->[0]: $!\n";
  next unless $ns->[0] eq 'user';
  # No user namespace of its own: set (again) by everything that enters, before it runs anything.
  # Through the host's /proc, before the mount namespace (the sandbox's /proc/sys is read-only); the
  # value written is the user namespace's just joined, where this process holds CAP_SYS_RESOURCE.
  my $max;
  open($max, '>', '/proc/sys/user/max_user_namespaces') && syswrite($max, "0\n") && close($max) or die "nsenter: user.max_user_namespaces: $!\n";
}
chdir($root) or die "nsenter: root: $!\n"; chroot('.') or die "nsenter: chroot: $!\n"; chdir('/');
syscall($NR_setgroups + 0, 0, 0) == 0 or die "nsenter: setgroups: $!\n";
syscall($NR_setresgid + 0, 0, 0, 0) == 0 or die "nsenter: setgid: $!\n"; syscall($NR_setresuid + 0, 0, 0, 0) == 0 or die "nsenter: setuid: $!\n";
# EINVAL (22 on every Linux): past the kernel's last capability.
for my $cap (0 .. 63) { next if $keep{$cap}; last if syscall($NR_prctl + 0, 24, $cap, 0, 0, 0) != 0 && $! + 0 == 22; }
# Then the image's User when it names one: the bounding set needed root to cut, before this change.
if ($uid != 0 || $gid != 0) {
  syscall($NR_setresgid + 0, $gid + 0, $gid + 0, $gid + 0) == 0 or die "nsenter: setgid: $!\n"; syscall($NR_setresuid + 0, $uid + 0, $uid + 0, $uid + 0) == 0 or die "nsenter: setuid: $!\n";
  die "nsenter: still $< $> $( $)\n" if $< != $uid || $> != $uid || ($( + 0) != $gid || ($) + 0) != $gid;
}
close($_) for values %fh; closedir($root);
my $child = fork(); die "nsenter: fork: $!\n" unless defined $child;
if ($child == 0) { exec { $cmd[0] } @cmd; print STDERR "nsenter: $cmd[0]: $!\n"; syscall($NR_exit_group + 0, 127); }
$SIG{$_} = 'IGNORE' for qw(INT TERM HUP QUIT);
waitpid($child, 0);
if ($? & 127) { $SIG{$_} = 'DEFAULT' for qw(INT TERM HUP QUIT); kill($? & 127, $$); }
syscall($NR_exit_group + 0, $? >> 8);
`

/**
 * The prefix that runs the rest of a command line inside a root-inside sandbox of init `nsPid`, as
 * `user` (its root by default) with ROOT_CAPS at most (none past the change of uid, for another user). Not nsenter: joining a user namespace gives every capability in
 * it and a full bounding set, which uid 0 keeps across exec, and the image need not have anything
 * to drop them with. This does what nsenter does (the namespaces, the network's first: it is the
 * host's; the init's root; uid and gid 0, no groups), then cuts the bounding set to ROOT_CAPS
 * before it becomes `user` (the bounding set needs root to cut: before the change of uid) and
 * starts the command, in the sandbox's pid namespace, and passes on its exit.
 *
 * With `join`, it first joins the cgroups of `procsFiles` itself, saying why it could not on
 * `ctlFd`: a shell parked inside the sandbox then needs no host shell to join them before it (one
 * process fewer for every command; see parked.ts).
 */
export function enterRootArgv(perl: string, nsPid: number, o: { user?: { uid: number; gid: number }; join?: { ctlFd: number; procsFiles: string[] } } = {}): string[] {
  const { user = { uid: 0, gid: 0 }, join } = o
  const arch = filterArch()
  if (!arch) throw new Error(`no syscall table for ${process.arch}`)
  const table = syscallTable(arch)
  const nr = ['setns', 'prctl', 'setgroups', 'setresgid', 'setresuid', 'exit_group'].map((n) => String(table.indexOf(n)))
  const caps = ROOT_CAPS.map((c) => CAP_NUMBERS[c]).join(',')
  return [perl, '-e', ENTER, String(nsPid), ...nr, caps, String(user.uid), String(user.gid), String(join?.ctlFd ?? 2), ...(join?.procsFiles ?? []), '--']
}
