/**
 * The syscall filter of every workspace process: a classic BPF program (struct sock_filter, eight
 * bytes each) assembled here, so no native addon is needed. bubblewrap loads the init's
 * (`--seccomp FD`); the spawner that starts the shells parked to become commands runs under the
 * entry filter (filterWrap), which they and everything they start inherit, so whatever enters
 * the sandbox through nsenter is under it too. A filter is inherited across fork and exec and
 * can never be removed.
 *
 * An allowlist modelled on Docker's default profile for an unprivileged container: the calls
 * ordinary programs make, some only with the arguments ordinary programs pass (personality's
 * standard values, clone without namespace flags, sockets of the families usual work opens).
 * Everything else is refused: mounts, keyrings, eBPF, perf, userfaultfd, io_uring, the calls
 * that reach into another process (pidfd_getfd, kcmp, process_madvise), memory placement, the
 * machine's clocks, modules and reboot, and every call newer than the table (syscall-table.ts).
 * Refused calls fail (EPERM; ENOSYS for a call the table does not know and for clone3, whose
 * flags a filter cannot read), they do not kill, so programs fall back as they would in Docker.
 *
 * The entry filter also allows what joining the sandbox takes (nsenter's setns and chroot): a
 * command carries it, but holds no capability in any namespace it could use them with. The
 * init's filter refuses them. `ptrace` stays allowed for debuggers: the pid namespace and the
 * sandbox's own uid keep every process outside the sandbox out of its reach. Not those the service
 * starts inside it (MCP servers): they run as the same uid, dumpable, so a workspace process may
 * attach to them or write their memory through /proc (unless YAMA's ptrace_scope forbids it; many
 * kernels have no YAMA), and what they say to the service is the workspace's. The browser is kept
 * out of reach otherwise: its binaries are executable but not readable by the sandbox's user
 * (scripts/setup.sh), which leaves it non-dumpable.
 */
import { syscallTable } from './syscall-table.ts'

export type Arch = 'x64' | 'arm64'
/** `init`: the sandbox's own processes; `entry`: the shells that join it (and so its commands). */
export type FilterUse = 'init' | 'entry'

const AUDIT_ARCH: Record<Arch, number> = { x64: 0xc000003e, arm64: 0xc00000b7 }
/** x86_64 syscalls with this bit set are the x32 ABI: a second table this filter does not check. */
const X32_SYSCALL_BIT = 0x40000000

/** Allowed whatever their arguments (Docker's unconditional list, less name_to_handle_at and clock_adjtime). */
const ALLOWED = `
  accept accept4 access adjtimex alarm bind brk cachestat capget capset chdir chmod chown clock_getres clock_gettime
  clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl
  epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64
  fallocate fanotify_mark fchdir fchmod fchmodat fchmodat2 fchown fchownat fcntl fdatasync fgetxattr flistxattr flock fork
  fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex futex_requeue futex_wait futex_waitv futex_wake futimesat getcpu
  getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp getpid getppid
  getpriority getrandom getresgid getresuid getrlimit get_robust_list getrusage getsid getsockname getsockopt gettid
  gettimeofday getuid getxattr getxattrat inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl
  io_destroy io_getevents io_pgetevents ioprio_get ioprio_set io_setup io_submit kill landlock_add_rule
  landlock_create_ruleset landlock_restrict_self lchown lgetxattr link linkat listen listmount listxattr listxattrat
  llistxattr lremovexattr lseek lsetxattr lstat madvise map_shadow_stack membarrier memfd_create memfd_secret mincore mkdir
  mkdirat mknod mknodat mlock mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend
  mq_unlink mremap mseal msgctl msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat open openat openat2
  pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2
  prlimit64 process_mrelease pselect6 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg
  recvmsg remap_file_pages removexattr removexattrat rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction
  rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo
  sched_getaffinity sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler
  sched_rr_get_interval sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl
  semget semop semtimedop sendfile sendmmsg sendmsg sendto setfsgid setfsuid setgid setgroups setitimer setpgid setpriority
  setregid setresgid setresuid setreuid setrlimit set_robust_list setsid setsockopt set_tid_address setuid setxattr
  setxattrat shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 socketpair splice stat statfs statmount statx
  symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun
  timer_gettime timer_settime timerfd_create timerfd_gettime timerfd_settime times tkill truncate umask uname unlink unlinkat
  uretprobe utime utimensat utimes vfork vmsplice wait4 waitid write writev
  ptrace process_vm_readv process_vm_writev
  arch_prctl modify_ldt get_thread_area set_thread_area
`.trim().split(/\s+/)

/** What nsenter needs to join the sandbox: allowed in the entry filter only. */
const ENTRY_ONLY = ['setns', 'chroot']

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: refused in clone's flags. */
const CLONE_NAMESPACES = 0x7e020000
/** unshare also takes CLONE_NEWTIME, whose bit in clone's flags is part of the exit signal. */
const UNSHARE_NAMESPACES = CLONE_NAMESPACES | 0x80
/** AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: not AF_VSOCK (no network namespace holds it), AF_ALG, AF_PACKET... */
const SOCKET_FAMILIES = [1, 2, 10, 16]
/** PER_LINUX, PER_LINUX32, UNAME26 with each, and the query (0xffffffff): Docker's list. */
const PERSONALITIES = [0, 8, 0x20000, 0x20008, 0xffffffff]

const EPERM = 1
const ENOSYS = 38
const EAFNOSUPPORT = 97
const RET_ALLOW = 0x7fff0000
const RET_ERRNO = 0x00050000

// Classic BPF opcodes (linux/filter.h): load a word of seccomp_data, compare, return.
const LD_ABS = 0x20
const JEQ = 0x15
const JGT = 0x25
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

const allow: Insn = [RET, 0, 0, RET_ALLOW]
const refuse = (errno: number): Insn => [RET, 0, 0, RET_ERRNO | errno]

/** A call allowed only when its first argument is one of `values` (the low word: all of an int). */
function argIn(nr: number, values: number[], errno: number): Insn[] {
  const k = values.length
  return [[JEQ, 0, k + 3, nr], [LD_ABS, 0, 0, ARG0_LOW], ...values.map((v, i): Insn => [JEQ, k - i, 0, v]), refuse(errno), allow]
}

/** A call allowed only when its first argument has none of the bits of `mask`. */
function argClear(nr: number, mask: number): Insn[] {
  return [[JEQ, 0, 4, nr], [LD_ABS, 0, 0, ARG0_LOW], [JSET, 0, 1, mask], refuse(EPERM), allow]
}

/** Contiguous runs of the allowed numbers, each one test (lone numbers) or two. */
function allowRuns(numbers: number[]): Insn[] {
  const sorted = [...new Set(numbers)].sort((a, b) => a - b)
  const out: Insn[] = []
  for (let i = 0; i < sorted.length; ) {
    let j = i
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++
    const [lo, hi] = [sorted[i]!, sorted[j]!]
    if (lo === hi) out.push([JEQ, 0, 1, lo], allow)
    else out.push([JGE, 0, 2, lo], [JGT, 1, 0, hi], allow)
    i = j + 1
  }
  return out
}

/** The compiled filter for `arch`, ready for `bwrap --seccomp` or seccomp(2). */
export function seccompFilter(arch: Arch = hostArch(), use: FilterUse = 'init'): Buffer {
  const key = `${arch} ${use}`
  let filter = compiled.get(key)
  if (!filter) compiled.set(key, (filter = compile(arch, use)))
  return filter
}
const compiled = new Map<string, Buffer>()

function compile(arch: Arch, use: FilterUse): Buffer {
  const table = syscallTable(arch)
  const nr = (name: string) => table.indexOf(name)
  const names = use === 'entry' ? [...ALLOWED, ...ENTRY_ONLY] : ALLOWED
  const prog: Insn[] = [
    [LD_ABS, 0, 0, ARCH],
    // Another ABI's syscall numbers mean other calls: nothing from it passes.
    [JEQ, 1, 0, AUDIT_ARCH[arch]],
    refuse(EPERM),
    [LD_ABS, 0, 0, NR],
  ]
  if (arch === 'x64') prog.push([JGE, 0, 1, X32_SYSCALL_BIT], refuse(EPERM))
  prog.push(
    // Newer than the table: as if this kernel had no such call, so programs fall back.
    [JGE, 0, 1, table.length], refuse(ENOSYS),
    // clone3 passes its flags in memory, out of a filter's reach: ENOSYS makes glibc fall back to clone.
    [JEQ, 0, 1, nr('clone3')], refuse(ENOSYS),
    ...argClear(nr('clone'), CLONE_NAMESPACES),
    ...argClear(nr('unshare'), UNSHARE_NAMESPACES),
    ...argIn(nr('socket'), SOCKET_FAMILIES, EAFNOSUPPORT),
    ...argIn(nr('personality'), PERSONALITIES, EPERM),
    // Names absent from an architecture's table (open, fork... on arm64) do not exist there.
    ...allowRuns(names.map(nr).filter((n) => n >= 0)),
    refuse(EPERM),
  )
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
 * The prefix of a command line that puts the rest of it under no_new_privs and the entry filter,
 * then execs it: Perl's syscall() does what a native addon would, without one. It fails closed:
 * a process it cannot filter never starts.
 */
export function filterWrap(perl: string, arch: Arch = hostArch()): string[] {
  const key = `${perl}\0${arch}`
  let argv = wraps.get(key)
  if (!argv) wraps.set(key, (argv = wrapArgv(perl, arch)))
  // Asked for at every shell parked (it picks the spawner): made once, copied out.
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
  return [perl, '-e', script, seccompFilter(arch, 'entry').toString('hex')]
}
