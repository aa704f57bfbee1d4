// Where the client commands send their requests and with which token: flags first, then
// WARREN_URL / WARREN_TOKEN, then the file `warren login` wrote. The token is a secret: the file is
// the user's alone (0600), and nothing here prints it.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createWarren, type Warren } from '../../sdk/src/index.ts'

export type Connection = { url: string; token: string }
export type ConnectionFlags = { url?: string; token?: string }

/** `$WARREN_CONFIG`, else `$XDG_CONFIG_HOME/warren/config.json`, else `~/.config/warren/config.json`. */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.WARREN_CONFIG) return env.WARREN_CONFIG
  const base = env.XDG_CONFIG_HOME || path.join(os.homedir(), '.config')
  return path.join(base, 'warren', 'config.json')
}

function readSaved(file: string): Partial<Connection> {
  try {
    const parsed = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<Connection>
    return { url: typeof parsed.url === 'string' ? parsed.url : undefined, token: typeof parsed.token === 'string' ? parsed.token : undefined }
  } catch {
    return {}
  }
}

export class NotConnected extends Error {}

export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): Connection {
  const saved = readSaved(configPath(env))
  const url = flags.url ?? env.WARREN_URL ?? saved.url ?? 'http://127.0.0.1:8080'
  const token = flags.token ?? env.WARREN_TOKEN ?? saved.token
  if (!token) throw new NotConnected(`no token: set WARREN_TOKEN, pass --token, or run \`warren login --url ${url}\` first`)
  return { url, token }
}

/** Writes the connection for later commands, readable by this user only. */
export function saveConnection(conn: Connection, env: NodeJS.ProcessEnv = process.env): string {
  const file = configPath(env)
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, JSON.stringify(conn, null, 2) + '\n', { mode: 0o600 })
  fs.renameSync(tmp, file)
  return file
}

/** The SDK client for a connection; every request says it comes from the CLI. */
export const cliClient = (conn: Connection): Warren => createWarren({ baseUrl: conn.url, token: conn.token, source: 'cli' })
