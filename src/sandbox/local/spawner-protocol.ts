/** What the service asks of its spawner (spawner-process.ts) over the IPC channel. */
export type SpawnerRequest =
  /** Start `file` with `pipes` pipes for stdio (0 to pipes-1), detached, as uid:gid when given. */
  | { t: 'spawn'; id: number; file: string; args: string[]; env: Record<string, string>; pipes: number; uid?: number; gid?: number }
  | { t: 'kill'; id: number; signal: NodeJS.Signals }

/** What the spawner answers: the pid, then each pipe (its handle beside the message), then the exit. */
export type SpawnerReply =
  | { t: 'pid'; id: number; pid: number }
  | { t: 'fd'; id: number; i: number }
  | { t: 'exit'; id: number; code: number | null; signal: NodeJS.Signals | null }
  | { t: 'error'; id: number; message: string }
