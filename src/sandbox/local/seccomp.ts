/**
 * The syscall filter of every workspace process: a classic BPF program (struct sock_filter, eight
 * bytes each) assembled here, so no native addon is needed. bubblewrap loads it for the init
 * (`--seccomp FD`); the shells parked to become commands load it before they wait (commandWrap),
 * so whatever enters the sandbox through nsenter is under it too. A filter is inherited across
 * fork and exec and can never be removed.
 *
 * It refuses what Docker's default profile refuses to an unprivileged container: kernel-facing
 * calls a workspace has no use for, and the usual roads of namespace and kernel escapes (new
 * namespaces, mounts, keyrings, eBPF, perf, userfaultfd, io_uring). `setns` stays allowed, because
 * nsenter needs it on the way in; inside, no process holds a capability it would need to use it.
 * `ptrace` stays allowed for debuggers: the pid namespace and the sandbox's own uid keep every
 * process outside the sandbox out of its reach.
 */

export type Arch = 'x64' | 'arm64'

const AUDIT_ARCH: Record<Arch, number> = { x64: 0xc000003e, arm64: 0xc00000b7 }
/** x86_64 syscalls with this bit set are the x32 ABI: a second table this filter does not check. */
const X32_SYSCALL_BIT = 0x40000000

/** Refused with EPERM. Names missing from an architecture's table do not exist there. */
const REFUSED = [
  // Mounts, in every generation of the API.
  'mount', 'umount2', 'pivot_root', 'move_mount', 'open_tree', 'open_tree_attr', 'fsopen', 'fsconfig', 'fsmount', 'fspick', 'mount_setattr',
  // Keyrings, eBPF, perf, userfaultfd and io_uring: large kernel surfaces behind many escapes.
  'keyctl', 'add_key', 'request_key', 'bpf', 'perf_event_open', 'userfaultfd', 'io_uring_setup', 'io_uring_enter', 'io_uring_register',
  // The machine itself: modules, kexec, reboot, swap, clocks, accounting, quotas, the kernel log.
  'init_module', 'finit_module', 'delete_module', 'create_module', 'get_kernel_syms', 'query_module', 'kexec_load', 'kexec_file_load',
  'reboot', 'swapon', 'swapoff', 'settimeofday', 'clock_settime', 'clock_adjtime', 'acct', 'quotactl', 'quotactl_fd', 'syslog',
  'iopl', 'ioperm', 'lookup_dcookie', 'nfsservctl', 'vhangup', 'uselib', 'ustat', 'sysfs', '_sysctl', 'fanotify_init',
  // File handles bypass the mount namespace (the "shocker" escape).
  'open_by_handle_at', 'name_to_handle_at',
] as const

type Name = (typeof REFUSED)[number] | 'clone' | 'clone3' | 'unshare'

/** Syscall numbers (asm/unistd_64.h for x86_64, asm-generic/unistd.h for arm64). */
const NUMBERS: Record<Arch, Partial<Record<Name, number>>> = {
  x64: {
    clone: 56, clone3: 435, unshare: 272,
    mount: 165, umount2: 166, pivot_root: 155, move_mount: 429, open_tree: 428, open_tree_attr: 467, fsopen: 430, fsconfig: 431,
    fsmount: 432, fspick: 433, mount_setattr: 442,
    keyctl: 250, add_key: 248, request_key: 249, bpf: 321, perf_event_open: 298, userfaultfd: 323,
    io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
    init_module: 175, finit_module: 313, delete_module: 176, create_module: 174, get_kernel_syms: 177, query_module: 178,
    kexec_load: 246, kexec_file_load: 320, reboot: 169, swapon: 167, swapoff: 168, settimeofday: 164, clock_settime: 227,
    clock_adjtime: 305, acct: 163, quotactl: 179, quotactl_fd: 443, syslog: 103, iopl: 172, ioperm: 173, lookup_dcookie: 212,
    nfsservctl: 180, vhangup: 153, uselib: 134, ustat: 136, sysfs: 139, _sysctl: 156, fanotify_init: 300,
    open_by_handle_at: 304, name_to_handle_at: 303,
  },
  arm64: {
    clone: 220, clone3: 435, unshare: 97,
    mount: 40, umount2: 39, pivot_root: 41, move_mount: 429, open_tree: 428, open_tree_attr: 467, fsopen: 430, fsconfig: 431,
    fsmount: 432, fspick: 433, mount_setattr: 442,
    keyctl: 219, add_key: 217, request_key: 218, bpf: 280, perf_event_open: 241, userfaultfd: 282,
    io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
    init_module: 105, finit_module: 273, delete_module: 106, kexec_load: 104, kexec_file_load: 294, reboot: 142,
    swapon: 224, swapoff: 225, settimeofday: 170, clock_settime: 112, clock_adjtime: 266, acct: 89, quotactl: 60, quotactl_fd: 443,
    syslog: 116, lookup_dcookie: 18, nfsservctl: 42, vhangup: 58, fanotify_init: 262,
    open_by_handle_at: 265, name_to_handle_at: 264,
  },
}

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: refused in clone's flags. */
const CLONE_NAMESPACES = 0x7e020000
/** unshare also takes CLONE_NEWTIME, whose bit in clone's flags is part of the exit signal. */
const UNSHARE_NAMESPACES = CLONE_NAMESPACES | 0x80

const EPERM = 1
const ENOSYS = 38
const RET_ALLOW = 0x7fff0000
const RET_ERRNO = 0x00050000

// Classic BPF opcodes (linux/filter.h): load a word of seccomp_data, compare, return.
const LD_ABS = 0x20
const JEQ = 0x15
const JGE = 0x35
const JSET = 0x45
const RET = 0x06

// Offsets in struct seccomp_data: nr, arch, then the arguments (little-endian: the low word first).
const NR = 0
const ARCH = 4
const ARG0_LOW = 16

type Insn = [code: number, jt: number, jf: number, k: number]

/** The filter's name for a Node architecture; null for one it has no syscall table for. */
export function filterArch(arch: string = process.arch): Arch | null {
  return arch === 'x64' || arch === 'arm64' ? arch : null
}

/** The host's architecture; host-check refuses to start workspaces on any other. */
function hostArch(): Arch {
  const arch = filterArch()
  if (!arch) throw new Error(`no syscall filter for ${process.arch}`)
  return arch
}

/** The compiled filter for `arch`, ready for `bwrap --seccomp` or seccomp(2). */
export function seccompFilter(arch: Arch = hostArch()): Buffer {
  const nr = NUMBERS[arch]
  const refuse = (errno: number): Insn => [RET, 0, 0, RET_ERRNO | errno]
  const prog: Insn[] = [
    [LD_ABS, 0, 0, ARCH],
    // Another ABI's syscall numbers mean other calls: nothing from it passes.
    [JEQ, 1, 0, AUDIT_ARCH[arch]],
    refuse(EPERM),
    [LD_ABS, 0, 0, NR],
  ]
  if (arch === 'x64') prog.push([JGE, 0, 1, X32_SYSCALL_BIT], refuse(EPERM))
  for (const name of REFUSED) {
    const n = nr[name]
    if (n !== undefined) prog.push([JEQ, 0, 1, n], refuse(EPERM))
  }
  // clone3 passes its flags in memory, out of a filter's reach: ENOSYS makes glibc fall back to clone.
  prog.push([JEQ, 0, 1, nr.clone3!], refuse(ENOSYS))
  for (const [name, mask] of [['clone', CLONE_NAMESPACES], ['unshare', UNSHARE_NAMESPACES]] as const) {
    prog.push([JEQ, 0, 4, nr[name]!], [LD_ABS, 0, 0, ARG0_LOW], [JSET, 0, 1, mask], refuse(EPERM), [RET, 0, 0, RET_ALLOW])
  }
  prog.push([RET, 0, 0, RET_ALLOW])
  const out = Buffer.alloc(prog.length * 8)
  prog.forEach(([code, jt, jf, k], i) => {
    out.writeUInt16LE(code, i * 8)
    out.writeUInt8(jt, i * 8 + 2)
    out.writeUInt8(jf, i * 8 + 3)
    out.writeUInt32LE(k >>> 0, i * 8 + 4)
  })
  return out
}

/**
 * The prefix of a command line that puts the rest of it under no_new_privs and the filter, then
 * execs it: Perl's syscall() does what a native addon would, without one. It fails closed: a
 * shell it cannot filter never starts.
 */
export function filterWrap(perl: string, arch: Arch = hostArch()): string[] {
  const key = `${perl}\0${arch}`
  let argv = wraps.get(key)
  if (!argv) wraps.set(key, (argv = wrapArgv(perl, arch)))
  // Every parked shell starts with it (a step's bash call parks the next): made once, copied out.
  return [...argv]
}
const wraps = new Map<string, string[]>()

function wrapArgv(perl: string, arch: Arch): string[] {
  const calls = arch === 'arm64' ? { prctl: 167, seccomp: 277 } : { prctl: 157, seccomp: 317 }
  const script = [
    'my $f = pack("H*", shift);',
    // PR_SET_NO_NEW_PRIVS; then SECCOMP_SET_MODE_FILTER with a struct sock_fprog {len, pointer}.
    `syscall(${calls.prctl}, 38, 1, 0, 0, 0) == 0 or die "warren: no_new_privs: $!\\n";`,
    `syscall(${calls.seccomp}, 1, 0, pack("S x![P] P", length($f) / 8, $f)) == 0 or die "warren: seccomp: $!\\n";`,
    'exec { $ARGV[0] } @ARGV or die "warren: exec $ARGV[0]: $!\\n";',
  ].join(' ')
  return [perl, '-e', script, seccompFilter(arch).toString('hex')]
}
