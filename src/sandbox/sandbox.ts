/**
 * The sandbox provider seam. Warren's workspaces run on whatever implements it: the local
 * provider (bubblewrap, a network namespace, cgroups) today; Kubernetes pods, E2B or Daytona
 * later. The service owns idle tracking, lifetime and usage; a provider only does what it is told.
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

export type SandboxSpec = {
  /** Stable id chosen by the service (the session id); names every host resource of the sandbox. */
  id: string
  /** Host folder bound read-write at `workspaceMount`; it outlives the sandbox (reclaim keeps it). */
  workspaceDir: string
  /** Where the workspace appears inside the sandbox, e.g. /workspace. */
  workspaceMount: string
  /** Environment of every process in the sandbox (profile variables). Never logged. */
  env: Record<string, string>
  network: NetworkPolicy
  limits: SandboxLimits
}

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

/** A long-running process in a sandbox with its standard streams (a local MCP server, say). */
export type SandboxProcess = {
  stdin: NodeJS.WritableStream
  stdout: NodeJS.ReadableStream
  stderr: NodeJS.ReadableStream
  /** Resolves when the process has exited: its code, or null when a signal ended it. */
  exited: Promise<number | null>
  /** Kills the process and everything it started. */
  kill(): Promise<void>
}

export type SandboxState = 'running' | 'paused' | 'destroyed'

export type Sandbox = {
  readonly id: string
  readonly state: SandboxState
  /** Runs `command` with /bin/sh -c inside the sandbox. Rejects only when the sandbox is unusable. */
  exec(req: ExecRequest, signal?: AbortSignal): Promise<ExecResult>
  /** Starts `command` with /bin/sh -c inside the sandbox, its stdin, stdout and stderr piped to the caller. */
  spawn(req: { command: string; cwd?: string; env?: Record<string, string> }): Promise<SandboxProcess>
  /** Resolves null when the path does not exist. Paths are relative to the workspace and never leave it. */
  readFile(path: string): Promise<Buffer | null>
  /** Creates parent folders; refuses (throws SandboxPathError) a path that leaves the workspace, symlinks included. */
  writeFile(path: string, data: Buffer, mode?: number): Promise<void>
  /** Where a port served inside the sandbox can be reached from the service. */
  resolvePreview(port: number): Promise<{ host: string; port: number }>
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
}

export type SandboxProvider = {
  readonly name: string
  /** Starts a sandbox; rejects with SandboxUnavailableError when the host cannot. */
  create(spec: SandboxSpec): Promise<Sandbox>
  /** A live sandbox of this process, or null. */
  get(id: string): Sandbox | null
  /** Removes host resources left by a crashed run (namespaces, rules, cgroups, processes). */
  cleanupOrphans(): Promise<void>
  report(): HostReport
  /** Destroys every live sandbox (service shutdown). */
  close(): Promise<void>
}

export class SandboxPathError extends Error {}
export class SandboxUnavailableError extends Error {}
