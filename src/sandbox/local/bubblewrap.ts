import fs from 'node:fs'
import path from 'node:path'
import { quote } from '../../shared/sh-quote.ts'
import { enterRootArgv, idmapRootArgv, ROOT_CAPS } from './idmap-root.ts'

/** Absolute paths of the host programs the local provider runs (found by host-check). */
export type Tools = {
  sh: string
  bwrap: string
  setpriv: string
  nsenter: string
  unshare: string
  mount: string
  env: string
  sleep: string
  chown: string
  /** Loads the entry syscall filter into the spawner of the shells parked to become commands (see seccomp.ts). */
  perl: string
  ip: string | null
}

export const SANDBOX_USER = 'agent'
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
/** Environment of the root-run wrappers: nothing from the service, nothing from the caller. */
export const WRAPPER_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }

/**
 * Entries of /etc the sandbox sees: what programs need to resolve names, verify TLS, load
 * libraries, follow alternatives and run Java. Not the whole /etc: it may hold the service's
 * configuration, credentials of other tools (npmrc, pip.conf) and machine identity. Fonts, for
 * anything that renders text (the browser tools' Chromium). Kept short on
 * purpose: every entry is one more read-only bind, 0.1–0.3 ms of every sandbox start.
 */
const ETC_NAMES = [
  'alternatives', 'fonts', 'hosts', 'ld.so.cache', 'localtime', 'nsswitch.conf', 'os-release', 'protocols', 'resolv.conf',
  'services', 'ssl',
]
const ETC_PREFIXES = ['java-']

let etcCache: string[] | null = null
export function etcEntries(): string[] {
  if (etcCache) return etcCache
  let names: string[] = []
  try {
    names = fs.readdirSync('/etc')
  } catch {
    /* no /etc: nothing to bind */
  }
  etcCache = names.filter((n) => ETC_NAMES.includes(n) || ETC_PREFIXES.some((p) => n.startsWith(p))).sort()
  return etcCache
}

/** /bin, /lib… are real folders on some hosts and links into /usr on merged-/usr ones. */
export function systemRoots(): string[] {
  const args: string[] = ['--ro-bind', '/usr', '/usr']
  for (const name of ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32']) {
    const p = `/${name}`
    let st: fs.Stats
    try {
      st = fs.lstatSync(p)
    } catch {
      continue
    }
    if (st.isSymbolicLink()) args.push('--symlink', fs.readlinkSync(p), p)
    else if (st.isDirectory()) args.push('--ro-bind', p, p)
  }
  return args
}

export type InitOptions = {
  tools: Tools
  uid: number
  workspaceDir: string
  workspaceMount: string
  /**
   * Null when the sandbox uid can reach workspaceDir itself. Otherwise an empty host folder the
   * workspace is bound onto in a private mount namespace: bwrap 0.8 resolves bind sources as the
   * unprivileged uid, which cannot traverse a service data folder of mode 0700.
   */
  stageDir: string | null
  netnsName: string | null
  hostname: string
  /**
   * An image as the root (see image-root.ts): overlayfs's mount options. The overlay is mounted on
   * stageDir (then required) in the init's private mount namespace, the workspace bound into it,
   * and that tree becomes the sandbox's `/`; the host's system is not bound at all.
   */
  overlay?: string
  /**
   * Root inside (with overlay): uid 0 of the sandbox is host uid `base` of its own range (see
   * idmap-root.ts); `owner` is the workspace folder's host owner, `lowers` the image's layers and
   * the folders their idmapped binds go on (the overlay's lower folders).
   */
  root?: { base: number; owner: number; lowers: Array<{ src: string; dst: string }>; user: RootUser }
}

/**
 * The long-lived init of a sandbox, run by a parked root shell already in the sandbox's cgroups
 * and in a mount namespace of its own (see parkInit): bubblewrap with `sleep infinity` as pid 2
 * of a new pid namespace; every exec call joins its namespaces. Fds: 3 receives bwrap's info
 * JSON (the namespace pid), 4 and 5 carry /etc/passwd and /etc/group, 6 the syscall filter
 * (seccomp.ts), 7 receives `R` once the sandbox is set up and may be entered.
 *
 * --disable-userns: a process inside can never become root of a user namespace of its own (the
 * usual road to CAP_SYS_ADMIN over mounts, nf_tables and the rest); the filter refuses it too.
 *
 * Chain: [ip netns exec] → setpriv (the sandbox uid, no groups, no new privileges) → bwrap;
 * `before`, when set, binds the workspace onto the stage folder first.
 */
export function initArgv(o: InitOptions): { before: string[] | null; argv: string[] } {
  const { tools: t } = o
  if (o.overlay !== undefined) return imageInitArgv(o, o.overlay)
  const bwrap = [
    t.bwrap,
    '--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts',
    ...(o.netnsName ? [] : ['--unshare-net']),
    '--disable-userns', '--seccomp', '6',
    '--cap-drop', 'ALL', '--new-session', '--die-with-parent',
    '--hostname', o.hostname,
    ...systemRoots(),
    '--dir', '/etc',
    ...etcEntries().flatMap((n) => ['--ro-bind-try', `/etc/${n}`, `/etc/${n}`]),
    '--perms', '0644', '--ro-bind-data', '4', '/etc/passwd',
    '--perms', '0644', '--ro-bind-data', '5', '/etc/group',
    '--bind', o.stageDir ?? o.workspaceDir, o.workspaceMount,
    '--tmpfs', '/tmp',
    '--dir', '/var', '--symlink', '../tmp', '/var/tmp',
    '--proc', '/proc',
    '--dev', '/dev',
    '--chdir', o.workspaceMount,
    '--info-fd', '3',
    '--clearenv', '--setenv', 'PATH', SANDBOX_PATH,
    // bwrap reports the pid (fd 3) before the sandbox is set up; this byte says setup is done.
    '--', '/bin/sh', '-c', 'printf R >&7 && exec "$0" infinity 7>&-', t.sleep,
  ]
  const drop = [t.setpriv, '--reuid', String(o.uid), '--regid', String(o.uid), '--clear-groups', '--no-new-privs', '--']
  const net = o.netnsName && t.ip ? [t.ip, 'netns', 'exec', o.netnsName] : []
  const before = o.stageDir ? [t.mount, '-n', '--bind', o.workspaceDir, o.stageDir] : null
  return { before, argv: [...net, ...drop, ...bwrap] }
}

export type ExecOptions = {
  tools: Tools
  uid: number
  /** Host pid of the sandbox's pid 1 (bwrap's info "child-pid"). */
  nsPid: number
  cwd: string
  env: Record<string, string>
  command: string
  /** The parked shell waits inside the sandbox already, as its user (see parkExec): no nsenter. */
  entered?: boolean
  /**
   * The sandbox has root inside its user namespace (an image with a uid range): enter as this
   * user of it (the image's User, see image-user.ts; uid 0 with ROOT_CAPS for its root). Null or
   * absent: the sandbox uid.
   */
  rootUser?: RootUser | null
}

/** Names a shell takes as its own rather than from its environment (dash resets IFS, say). */
const SHELL_OWN = new Set(['IFS', 'ENV', 'PS1', 'PS2', 'PS4', 'OPTIND', 'PPID', 'PWD', 'OLDPWD'])
/** A name the shell can assign (others, with a dot, go through env(1)). */
const SHELL_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * The init of a sandbox on an image: the same walls (namespaces, --disable-userns, the filter, no
 * capabilities, no_new_privs, the uid), a different root. The service's, not the image's: /proc,
 * /dev, a private /tmp, /etc/resolv.conf (the host's resolver, reached through the network
 * namespace as today) and the workspace. The image has no `sleep` to count on, so the init's shell
 * waits on fd 4, a pipe the service holds open and never writes (see startInit).
 */
function imageInitArgv(o: InitOptions, overlay: string): { before: string[]; argv: string[] } {
  const { tools: t } = o
  if (!o.stageDir) throw new Error('a sandbox on an image needs a stage folder (/mnt, /media or /srv)')
  const bwrap = [
    t.bwrap,
    '--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts',
    ...(o.netnsName ? [] : ['--unshare-net']),
    // Root inside: bubblewrap refuses --disable-userns beside --userns-block-fd; whatever enters
    // the sandbox sets the namespace's user.max_user_namespaces to 0 before it runs anything (see
    // enterRootArgv), which is what --disable-userns comes to.
    ...(o.root ? [] : ['--disable-userns']), '--seccomp', '6',
    '--cap-drop', 'ALL', '--new-session', '--die-with-parent',
    // Root inside: the service writes the user namespace's maps (a range, which bubblewrap alone
    // cannot) while bubblewrap waits on fd 5 (see startInit).
    ...(o.root ? ['--uid', '0', '--gid', '0', '--userns-block-fd', '5', ...ROOT_CAPS.flatMap((c) => ['--cap-add', `CAP_${c}`])] : []),
    '--hostname', o.hostname,
    '--bind', o.stageDir, '/',
    '--ro-bind-try', '/etc/resolv.conf', '/etc/resolv.conf',
    // Sticky and writable by all, as a system's /tmp is: an image has users of its own (apt's
    // _apt writes its temporary files there), where bubblewrap's default 0755 leaves /tmp to root.
    '--perms', '1777', '--tmpfs', '/tmp',
    '--proc', '/proc',
    '--dev', '/dev',
    '--chdir', o.workspaceMount,
    '--info-fd', '3',
    '--clearenv', '--setenv', 'PATH', SANDBOX_PATH,
    '--', '/bin/sh', '-c', 'printf R >&7 && exec 7>&- && while read -r _ <&4; do :; done',
  ]
  const drop = [t.setpriv, '--reuid', String(o.uid), '--regid', String(o.uid), '--clear-groups', '--no-new-privs', '--']
  const net = o.netnsName && t.ip ? [t.ip, 'netns', 'exec', o.netnsName] : []
  // Root on the host, in the init's own mount namespace: gone with the sandbox, never on the host.
  const mount = 'm=$1; shift; "$m" -n -t overlay overlay -o "$1" "$2" && "$m" -n --bind "$3" "$2$4"'
  const before = o.root
    ? idmapRootArgv({ perl: t.perl, ...o.root, overlay, stage: o.stageDir, workspaceDir: o.workspaceDir, workspaceMount: o.workspaceMount })
    : [t.sh, '-c', mount, 'sh', t.mount, overlay, o.stageDir, o.workspaceDir, o.workspaceMount]
  return { before, argv: [...net, ...drop, ...bwrap] }
}

/**
 * One command inside a running sandbox, run by a parked root shell (no supplementary groups)
 * already in the sandbox's cgroups. Chain: nsenter (every namespace of the init, the user
 * namespace last, then the sandbox uid and gid; left out when the shell entered while parked)
 * → sh, which changes to the command's folder,
 * sets the environment (the only place it is set: nothing before it runs with caller-chosen
 * variables such as LD_PRELOAD) and runs the command. Each process on this path is paid on every
 * command: the environment is read with the shell's own `read`, not a `cat` in a subshell, and
 * the same shell runs the command unless the environment asks for a second (see `direct`).
 *
 * No setpriv --no-new-privs here (it would cost a sixth of a round trip): the parked shell already
 * runs under no_new_privs (see parkExec), and nsenter and what it starts inherit it.
 */
export function execArgv(o: ExecOptions): { argv: string[]; fd9: string | null; prelude: string } {
  const { tools: t } = o
  const direct = !Object.keys(o.env).some((k) => !SHELL_NAME.test(k) || SHELL_OWN.has(k))
  if (o.entered && direct) {
    // The parked shell is the sandbox user inside already: it enters the folder, then sets the
    // environment itself (read with the rest of its script, from the pipe only the service
    // writes, never a command line) and execs a fresh shell for the command. Each byte of its
    // script costs it a read(2), so the values are read once, not again from fd 9 by a second
    // shell. Nothing privileged runs with a caller-chosen variable: every process here is the
    // sandbox user's.
    const assign = Object.entries(o.env).map(([k, v]) => `${k}=${quote(v)}`).join('\n')
    const prelude = `cd -P -- ${quote(o.cwd)} || exit 125; unset OLDPWD; set -a\n${assign}\nset +a; `
    return { argv: ['/bin/sh', '-c', o.command, '/bin/sh'], fd9: null, prelude }
  }
  // Values (profile secrets among them) are sourced from fd 9 inside the sandbox rather than
  // passed as arguments, which any host user could read in /proc/<pid>/cmdline. Only names the
  // shell cannot assign (with a dot) still go through env(1).
  const viaFd = ([k]: [string, string]) => SHELL_NAME.test(k)
  const shellNames = Object.entries(o.env).filter(viaFd)
  const others = Object.entries(o.env).filter((e) => !viaFd(e)).map(([k, v]) => `${k}=${v}`)
  const fd9 = shellNames.map(([k, v]) => `${k}=${quote(v)}\n`).join('')
  // The shell's own two variables, named as none of the command's, and gone before it runs.
  const free = (name: string): string => (Object.hasOwn(o.env, name) ? free(`${name}_`) : name)
  const [text, line] = [free('_warren_env'), free('_warren_line')]
  // The shell's environment is the parked shell's (PATH, and the PWD and OLDPWD of its own cd):
  // every name of fd 9 replaces its own, and OLDPWD goes. The folder is entered as the sandbox
  // uid, before any caller-chosen variable (CDPATH) is set. Read from the inherited descriptor:
  // reopening /dev/fd/9 is refused once the uid changed.
  const enter =
    `cd -P -- ${quote(o.cwd)} || exit 125; unset OLDPWD; ${text}=; ` +
    `while IFS= read -r ${line} <&9 || [ -n "$${line}" ]; do ${text}="$${text}$${line}$1"; done; ` +
    `set -a; eval "$${text}" || exit 125; set +a; exec 9<&-; unset ${text} ${line}; shift`
  // The command runs in this shell, on the same first line (its line numbers are a fresh
  // shell's: the newline the loop needs comes as $1), with $0 and no arguments as a fresh shell
  // has them; unless a name needs env(1) or is one a fresh shell would not take as this one does.
  const run = direct
    ? ['/bin/sh', '-c', `${enter}; ${o.command}`, '/bin/sh', '\n']
    : ['/bin/sh', '-c', `${enter}; exec "$@" /bin/sh -c "$0"`, o.command, '\n', ...(others.length > 0 ? [t.env, ...others] : [])]
  return { argv: o.entered ? run : [...enterArgv(t, o.nsPid, o.uid, o.rootUser), ...run], fd9, prelude: '' }
}

/** The prefix that runs the rest of a command line inside the sandbox of init `nsPid`, as `uid`. */
export function enterArgv(t: Tools, nsPid: number, uid: number, rootUser: RootUser | null = null): string[] {
  if (!rootUser) return [t.nsenter, '-t', String(nsPid), '-U', '-m', '-p', '-i', '-u', '-n', '-r', '-S', String(uid), '-G', String(uid), '--']
  return enterRootArgv(t.perl, nsPid, { user: rootUser })
}

/** A user of a root-inside sandbox's own ids (0…65535): its root, or the image's User. */
export type RootUser = { uid: number; gid: number }

/** Environment of sandbox processes, lowest precedence first; refuses names env(1) would misread. */
export function sandboxEnv(workspaceMount: string, ...layers: Array<Record<string, string> | undefined>): Record<string, string> {
  const env: Record<string, string> = {
    PATH: SANDBOX_PATH,
    HOME: workspaceMount,
    USER: SANDBOX_USER,
    LOGNAME: SANDBOX_USER,
    SHELL: '/bin/sh',
    LANG: 'C.UTF-8',
  }
  for (const layer of layers) {
    for (const [k, v] of Object.entries(layer ?? {})) {
      if (!/^[A-Za-z_][A-Za-z0-9_.]*$/.test(k)) throw new TypeError(`invalid environment variable name: ${JSON.stringify(k)}`)
      if (v.includes('\0')) throw new TypeError(`environment variable ${k} holds a NUL byte`)
      env[k] = v
    }
  }
  return env
}

export function passwdFile(uid: number, home: string): string {
  const shell = fs.existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh'
  return [
    'root:x:0:0:root:/root:/usr/sbin/nologin',
    `${SANDBOX_USER}:x:${uid}:${uid}:Warren workspace:${home}:${shell}`,
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
    '',
  ].join('\n')
}

export function groupFile(uid: number): string {
  return ['root:x:0:', `${SANDBOX_USER}:x:${uid}:`, 'nogroup:x:65534:', ''].join('\n')
}

/** Where the workspace may appear: absolute, and not over a system folder the sandbox needs. */
export function checkMount(mount: string): string | null {
  if (!path.isAbsolute(mount) || path.normalize(mount) !== mount || mount === '/') return 'must be an absolute, normalized path other than /'
  const top = mount.split('/')[1]!
  if (['usr', 'bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32', 'etc', 'proc', 'dev', 'tmp', 'var'].includes(top)) {
    return `must not be inside /${top}`
  }
  return null
}
