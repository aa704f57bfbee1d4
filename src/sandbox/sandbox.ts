import type { Duplex, Readable } from 'node:stream'

/**
 * The sandbox provider seam. Warren's workspaces run on whatever implements it: the local
 * provider (bubblewrap, a network namespace, cgroups) today; Kubernetes pods, E2B or Daytona
 * later, each a kind of the registry in providers.ts (WARREN_SANDBOX_PROVIDER). The service owns
 * idle tracking, lifetime and usage; a provider only does what it is told, and nothing outside
 * this folder knows which kind it is.
 */

export type SandboxLimits = {
  /** Memory ceiling in bytes; past it the sandbox's processes are killed (OOM), not the service. */
  memoryBytes: number
  /** Most processes (and threads) alive at once inside the sandbox. */
  pids: number
  /** CPU share as a fraction of one core (1 = one full core). */
  cpus: number
}

export type NetworkPolicy = {
  /**
   * Domain globs the workspace may reach through the egress proxy (`*` and `**`, e.g.
   * `registry.npmjs.org`, `*.github.com`); an empty list means no network at all.
   */
  allow: string[]
  /** Domain globs refused even when an allow glob matches them: deny beats allow. */
  deny?: string[]
}

/**
 * An OCI image a sandbox runs on: its layers the read-only base, with a writable layer of the
 * sandbox's own over them and the workspace at workspaceMount as ever.
 */
export type SandboxImage = {
  /** The reference as the caller named it: `host[:port]/name:tag` or `…@sha256:<digest>`. */
  ref: string
  /**
   * The digest it resolved to before (`sha256:…`), when it did: the sandbox then starts that very
   * image whatever the tag names now (a node that takes the session over starts what the first ran).
   * Absent: the provider resolves the reference now, and the sandbox says what it got (Sandbox.image).
   */
  digest?: string
}

/** How far getting a sandbox's image is (a pull the provider makes or waits on). */
export type ImageProgress = {
  ref: string
  /** Compressed bytes of the image's layers held or received so far, of `totalBytes`. */
  bytes: number
  totalBytes: number
  layers: number
  /** Layers not held yet. */
  layersLeft: number
}

/**
 * Creating a sandbox on an image failed because of the image (an unknown name or tag, a digest
 * mismatch, a registry down or refusing the credentials, a layer past a ceiling): `message` names
 * the reason in words fit for the session's caller (never a credential).
 */
export class SandboxImageError extends Error {
  override name = 'SandboxImageError'
}

export type SandboxSpec = {
  /**
   * Stable id chosen by the service (the session id); names every host resource of the sandbox and
   * its workspace, which the provider keeps where it likes: it outlives the sandbox (reclaim keeps
   * it) until deleteWorkspace.
   */
  id: string
  /**
   * True when the workspace was made before (the sandbox is brought back after a reclaim or a
   * restart): create rejects with SandboxUnavailableError when it is gone, rather than start over
   * on an empty one. Otherwise it is made when missing.
   */
  existing?: boolean
  /** Where the workspace appears inside the sandbox, e.g. /workspace. */
  workspaceMount: string
  /** Environment of every process in the sandbox (profile variables). Never logged. */
  env: Record<string, string>
  network: NetworkPolicy
  limits: SandboxLimits
  /**
   * The root the sandbox runs on. Absent: the host's own system, as every workspace runs today. A
   * provider that cannot run images rejects create with SandboxUnavailableError saying so, before
   * it makes anything, rather than start the sandbox on another root than the one asked for; one
   * that cannot get the image rejects with SandboxImageError.
   */
  image?: SandboxImage
  /** Called as the image comes (never after create settles); a provider that has it at once may never call it. */
  onImageProgress?: (p: ImageProgress) => void
}

/**
 * Where a port served inside a sandbox is reached from the service, for the preview gateway to send
 * requests and WebSocket upgrades to: an address it dials (the local provider's workspace address,
 * a pod's IP), or the URL of an origin the provider serves the port at (a Kubernetes Service's
 * `http://<name>.<namespace>.svc:3000`, a remote provider's `https://3000-<id>.example.dev`), sent
 * its own Host and, for https, reached over TLS.
 */
export type PreviewTarget = { host: string; port: number } | { url: string }

export type ExecRequest = {
  command: string
  /** Working directory inside the sandbox; defaults to the workspace mount. */
  cwd?: string
  env?: Record<string, string>
  /** Kills the whole process tree when exceeded; the result says timedOut. */
  timeoutMs?: number
  onStdout?: (chunk: Buffer) => void
  onStderr?: (chunk: Buffer) => void
}

export type ExecResult = {
  /** Null when the process was killed by a signal. A non-zero exit is a result, not an error. */
  exitCode: number | null
  signal: string | null
  timedOut: boolean
  /** True when the AbortSignal fired; the whole process tree was killed. */
  aborted: boolean
  stdout: Buffer
  stderr: Buffer
}

/** What Sandbox.spawn starts. */
export type SpawnRequest = {
  command: string
  cwd?: string
  env?: Record<string, string>
  /**
   * How many more pipes the process gets, as fds 3, 4… (0 when left out, at most 4; a TypeError
   * otherwise): a channel to the caller that nothing in the sandbox names, unlike a port or a
   * file (a browser's --remote-debugging-pipe). Another process of the sandbox's user can still
   * copy such an fd (pidfd_getfd): what comes through it is as hostile as anything the workspace
   * writes.
   */
  extraFds?: number
}

/** A long-running process in a sandbox with its standard streams (a local MCP server, say). */
export type SandboxProcess = {
  stdin: NodeJS.WritableStream
  stdout: NodeJS.ReadableStream
  stderr: NodeJS.ReadableStream
  /**
   * The extra pipes asked for (SpawnRequest.extraFds), fd 3 first: each the caller's end of a
   * socket pair whose other end the process holds.
   */
  fds: Duplex[]
  /** Resolves when the process has exited: its code, or null when a signal ended it. */
  exited: Promise<number | null>
  /** Kills the process and everything it started. */
  kill(): Promise<void>
}

export type SandboxState = 'running' | 'paused' | 'destroyed'

export type EntryType = 'file' | 'folder' | 'link' | 'other'

/** What one entry of the workspace is, the entry itself: a link is a link, never what it points to. */
export type EntryStat = {
  type: EntryType
  /** Bytes of a regular file; whatever the host says for anything else. */
  size: number
  mtimeMs: number
}

/** One entry of a listing: a regular file, a link (with its target, not followed) or another non-folder. */
export type ListedEntry = {
  /** Relative to the workspace, no leading `./`. */
  path: string
  type: Exclude<EntryType, 'folder'>
  /** A link's target as written, for links only. */
  target?: string
}

/** What tells a regular file changed between two snapshots without reading it. */
export type FileStamp = { size: number; mtimeMs: number; ino: number }
/** The regular files of the workspace by path, outside `.git` and `node_modules` folders. */
export type WorkspaceSnapshot = Map<string, FileStamp>

/** A regular file created, modified (size, mtime or inode differ) or deleted; a file turned into a link or folder reads as deleted. */
export type WorkspaceChange = { path: string; kind: 'created' | 'modified' | 'deleted' }

/** A window opened on the workspace's changes (see Sandbox.openChanges). */
export type ChangeWindow = {
  /**
   * What changed in the workspace's regular files (outside `.git` and `node_modules` folders, links
   * never followed) between the window's opening and this call, whoever changed them (a command,
   * a process it left running, the host), sorted by path: the same answer as comparing two
   * snapshots taken at those moments. Ends the window; call it once. Rejects with
   * SandboxUnavailableError when the sandbox was destroyed meanwhile.
   */
  close(): Promise<WorkspaceChange[]>
}

/** A regular file opened for reading: its size when opened, and its bytes (the file that was checked, whatever the path is now). */
export type OpenedFile = {
  size: number
  /** Ends the file's use when it ends or is destroyed; destroy it when not read to the end. */
  stream: Readable
}

/**
 * Reads of a workspace. Paths are relative to the workspace and never leave it: an absolute
 * path, `..`, a NUL byte or a symbolic link anywhere in the path is refused (throws
 * SandboxPathError), never followed, whatever the agent planted in the tree meanwhile.
 */
export type WorkspaceReader = {
  /** Resolves null when the path does not exist. Paths are relative to the workspace and never leave it. */
  readFile(path: string): Promise<Buffer | null>
  /** The entry itself (a link is reported as a link); null when it does not exist; throws SandboxPathError when a folder on the way is a link. */
  stat(path: string): Promise<EntryStat | null>
  /**
   * Every non-folder entry below the folder `path` ('' or '.' for the whole workspace), recursively,
   * skipping `.git` and `node_modules` folders, in no set order; null when `path` is missing, not a
   * folder or a link (nothing below a link is listed).
   */
  list(path: string): Promise<ListedEntry[] | null>
  /** A regular file as a stream, for reading large files without holding them; null when it does not exist; throws SandboxPathError for a link, folder or device. */
  openRead(path: string): Promise<OpenedFile | null>
  /** The regular files of the workspace with their stamps, to tell what a command changed (compare two). */
  snapshot(): Promise<WorkspaceSnapshot>
}

export type Sandbox = WorkspaceReader & {
  readonly id: string
  /** The image it runs on, with the digest it resolved to; undefined on the host's own system. */
  readonly image?: { ref: string; digest: string }
  readonly state: SandboxState
  /**
   * Opens a window on what changes in the workspace from now on, to tell what a command changed in
   * time that grows with what it changed rather than with the workspace (the local provider keeps a
   * watcher of the folder, and walks the whole tree once when it has none or lost one). Every window
   * opened must be closed. Rejects with SandboxUnavailableError when the sandbox is destroyed.
   */
  openChanges(): Promise<ChangeWindow>
  /** Runs `command` with /bin/sh -c inside the sandbox. Rejects only when the sandbox is unusable. */
  exec(req: ExecRequest, signal?: AbortSignal): Promise<ExecResult>
  /** Starts `command` with /bin/sh -c inside the sandbox, its stdin, stdout, stderr (and extraFds) piped to the caller. */
  spawn(req: SpawnRequest): Promise<SandboxProcess>
  /** Creates parent folders; refuses (throws SandboxPathError) a path that leaves the workspace, symlinks included. */
  writeFile(path: string, data: Buffer, mode?: number): Promise<void>
  /**
   * Clones a git repository into the workspace while it is still empty, from the service's side:
   * with the service's reach and credentials, not through the sandbox's egress policy (the git host
   * need not be on the workspace's allowlist), and before any command of the agent runs. Resolves
   * the branch checked out; null when the workspace is not empty (a clone never lands over work).
   * Rejects with git's reason (an Error) when the clone fails, leaving no half-made repository.
   */
  cloneRepo(req: { url: string; branch?: string; timeoutMs: number }): Promise<{ branch: string } | null>
  /** Where a port served inside the sandbox can be reached from the service (see PreviewTarget). Rejects with SandboxUnavailableError when it cannot be (no network). */
  resolvePreview(port: number): Promise<PreviewTarget>
  /** Freezes every process; nothing runs until resume. */
  pause(): Promise<void>
  resume(): Promise<void>
  /** Kills every process and removes every host resource (namespace, rules, cgroup). Idempotent. */
  destroy(): Promise<void>
}

export type HostReport = {
  provider: string
  /** Plain sentences: what works. */
  available: string[]
  /** Plain sentences: what is missing and what that means. */
  missing: string[]
  /** What workspaces on an image get on this host; null when the provider runs no images. */
  images: HostImageSupport | null
}

export type HostImageSupport = {
  /** The host mounts an image's layers under a workspace's own writable layer: workspaces on an image can start. */
  overlay: boolean
  /** The host maps the layers onto a range of uids of a workspace's own: it can run as root inside. */
  uidRanges: boolean
  /** How many workspaces on an image may run as root inside at once (0: they run unprivileged). */
  rootRanges: number
}

/**
 * What a provider's sandboxes hold on the host this process runs on, which no other node on the
 * same host may share: a node records its provider's claim when it joins the store, and is refused
 * when the claim overlaps a live node's on the same host (see nodes/join-node.ts). A provider whose
 * sandboxes run elsewhere (Kubernetes pods, a remote service) claims only its prefix: no subnet and
 * no uids.
 */
export type HostClaim = {
  /**
   * Names the provider's resources (the local provider's cgroups, network namespaces, veths and
   * nftables table); its start-up clean-up removes whatever carries it, so no two live nodes on a
   * host may share one.
   */
  prefix: string
  /** The IPv4 CIDR its sandboxes' addresses on this host come from; null when it takes none here. */
  subnet: string | null
  /** The host uids its sandboxes own, [uidBase, uidBase + uidCount); uidCount 0 when it takes none. */
  uidBase: number
  uidCount: number
}

export type SandboxProvider = {
  readonly name: string
  /** What this provider holds on the host (see HostClaim), fixed once it is made. */
  readonly claim: HostClaim
  /** Starts a sandbox; rejects with SandboxUnavailableError when the host cannot. */
  create(spec: SandboxSpec): Promise<Sandbox>
  /** A live sandbox of this process, or null. */
  get(id: string): Sandbox | null
  /**
   * Reads of the workspace of sandbox `id` whether or not a sandbox is up (running, paused,
   * destroyed, or none since a restart): a workspace outlives its sandboxes. A workspace never made
   * (or deleted) reads as empty: null for every path; its snapshot rejects.
   */
  workspace(id: string): WorkspaceReader
  /** Destroys the sandbox `id` if one is up, then removes its workspace for good. Idempotent. */
  deleteWorkspace(id: string): Promise<void>
  /**
   * The whole workspace of `id` as a gzip-compressed tar stream, whether or not a sandbox is up,
   * for a copy kept elsewhere (snapshots): every folder (empty ones too), regular file and
   * symbolic link (kept as a link, never followed) with its permission bits and mtime, `.git` and
   * `node_modules` included (a workspace brought back must run as it did); no owners, sockets,
   * fifos or devices. Resolves null when the workspace was never made (or is deleted). Taken while
   * processes run, it is not one instant's state: a file changed meanwhile may come out torn, one
   * that shrank while read is padded with zeros. The stream errors when a read fails. A provider
   * whose sandboxes on an image have a writable layer of their own adds it after the workspace's
   * entries, under absolute paths (the layer's root is `/`), with owners and OCI whiteouts: what
   * the agent installed outside the workspace comes back with it.
   */
  packWorkspace(id: string): Promise<Readable | null>
  /**
   * Unpacks an archive made by packWorkspace into the workspace of `id`, when the workspace is
   * missing or empty and no sandbox of it is up, before a sandbox is created over it; resolves
   * false, writing nothing, otherwise. All or nothing: a failed unpack (rejects with the reason)
   * leaves the workspace as it was. Whatever the archive holds, nothing is written outside the
   * workspace (absolute paths, `..`, writes through links refused) and the tree gets the owner the
   * provider's sandboxes expect. The archive's layer entries (absolute paths), if the provider
   * keeps layers, become the sandbox's own layer, all or nothing with the workspace, confined to
   * it; a provider that keeps none leaves them out.
   */
  unpackWorkspace(id: string, archive: Readable): Promise<boolean>
  /** Removes host resources left by a crashed run (namespaces, rules, cgroups, processes). */
  cleanupOrphans(): Promise<void>
  report(): HostReport
  /** Destroys every live sandbox (service shutdown). */
  close(): Promise<void>
}

export class SandboxPathError extends Error {}
export class SandboxUnavailableError extends Error {}
