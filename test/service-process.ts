// `warren serve` as a child process, the way a deployment runs it: for what only a real process
// shows (a SIGKILL, environment read at start such as NODE_EXTRA_CA_CERTS).
import assert from 'node:assert/strict'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import readline from 'node:readline'

export const ROOT = path.join(import.meta.dirname, '..')
export const NODE = path.join(ROOT, 'node_modules', '.bin', 'node')

export type Exit = { code: number | null; signal: NodeJS.Signals | null }
export type ApiResponse = { status: number; body: any; text: string }

export type ServiceProcess = {
  /** Base URL of the running child (`http://127.0.0.1:N`). */
  readonly url: string
  readonly running: boolean
  /** The running child's process id; undefined while none runs. */
  readonly pid: number | undefined
  /** The last lines it wrote, stdout and stderr, for failure messages. */
  readonly output: string[]
  /** Every line it wrote since it was created, stdout and stderr (to search its whole log). */
  readonly log: string[]
  /** Bearer token `api` sends unless given another. */
  token: string
  /** Starts `warren serve` and resolves once it says where it listens. */
  start(): Promise<void>
  /** Sends `signal` and waits until the child is gone; past `ms` it is killed and this throws. */
  stop(signal: NodeJS.Signals, ms?: number): Promise<Exit>
  /** Runs `warren tokens create --org NAME` against the same store; resolves with the token. */
  mint(org: string): Promise<string>
  /** `opts.timeoutMs` bounds the whole request: a paused service must not hold its caller for good. */
  api(method: string, url: string, body?: unknown, token?: string, opts?: ApiOptions): Promise<ApiResponse>
}

export type ApiOptions = { headers?: Record<string, string>; timeoutMs?: number }

/** The test process's environment without anything that would point the child elsewhere, plus `env`. */
function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {}
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('WARREN_') && !['DATABASE_URL', 'PORT', 'HOST', 'NODE_EXTRA_CA_CERTS'].includes(k)) out[k] = v
  // Metrics on a free port: the default one would be shared by every service a test starts. The fake
  // model servers listen on 127.0.0.1, which the outbound policy opens only when listed.
  return { ...out, PORT: '0', HOST: '127.0.0.1', WARREN_METRICS_PORT: '0', WARREN_MODEL_ALLOW_PRIVATE: '127.0.0.1/32', ...env }
}

/** Where the service runs from: an installation (its src/main.ts) and the folder it is started in. */
export type ServiceWhere = { root?: string; cwd?: string }

/** A service process on `env` (WARREN_DATA_DIR at least); started and stopped by the test, as often as it likes. */
export function serviceProcess(env: Record<string, string>, where: ServiceWhere = {}): ServiceProcess {
  const main = path.join(where.root ?? ROOT, 'src', 'main.ts')
  const cwd = where.cwd ?? ROOT
  let proc: ChildProcess | null = null
  let exited: Promise<Exit> | null = null
  let url = ''
  const output: string[] = []
  const log: string[] = []
  const keep = (line: string) => {
    log.push(line)
    output.push(line)
    if (output.length > 200) output.shift()
  }
  // Whatever happens to the test process, the service it started goes with it.
  process.once('exit', () => proc?.kill('SIGKILL'))

  const svc: ServiceProcess = {
    get url() {
      assert.ok(proc, 'the service is not running')
      return url
    },
    get running() {
      return proc !== null
    },
    get pid() {
      return proc?.pid
    },
    output,
    log,
    token: '',
    async start() {
      assert.equal(proc, null, 'the service is already running')
      const child = spawn(NODE, [main, 'serve'], { cwd, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
      const ended = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
      readline.createInterface({ input: child.stderr! }).on('line', (l) => keep(`stderr: ${l}`))
      url = await new Promise<string>((resolve, reject) => {
        // A service that never listens is killed: left running, its pipes would hold the test file open for good.
        const timer = setTimeout(() => {
          child.kill('SIGKILL')
          reject(new Error(`warren serve did not say it listens within 120 s:\n${output.join('\n')}`))
        }, 120_000)
        readline.createInterface({ input: child.stdout! }).on('line', (l) => {
          keep(`stdout: ${l}`)
          const m = /^warren: listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(l)
          if (m) {
            clearTimeout(timer)
            resolve(m[1]!)
          }
        })
        void ended.then(({ code, signal }) => {
          clearTimeout(timer)
          reject(new Error(`warren serve exited (code ${code}, signal ${signal}) before listening:\n${output.join('\n')}`))
        })
      })
      proc = child
      exited = ended
    },
    async stop(signal, ms = 20_000) {
      const child = proc
      assert.ok(child && exited, 'the service is not running')
      child.kill(signal)
      let timer: NodeJS.Timeout | undefined
      const ended = await Promise.race([exited, new Promise<null>((r) => (timer = setTimeout(() => r(null), ms)))])
      clearTimeout(timer)
      proc = null
      if (ended === null) {
        child.kill('SIGKILL')
        await exited
        throw new Error(`warren serve did not exit within ${ms} ms of ${signal}; killed:\n${output.join('\n')}`)
      }
      return ended
    },
    async mint(org) {
      const minted = await new Promise<string>((resolve, reject) =>
        execFile(NODE, [main, 'tokens', 'create', '--org', org], { cwd, env: childEnv(env), timeout: 90_000 }, (err, stdout, stderr) =>
          err ? reject(new Error(`tokens create failed: ${err.message}\n${stderr}`)) : resolve(stdout),
        ),
      )
      const lines = minted.split('\n').filter((l) => l.trim() !== '')
      assert.equal(lines.length, 1, minted)
      const token = JSON.parse(lines[0]!).token as string
      assert.ok(token, minted)
      return token
    },
    async api(method, url, body, token = svc.token, opts = {}) {
      const res = await fetch(svc.url + url, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...opts.headers },
        body: body === undefined ? undefined : JSON.stringify(body),
        ...(opts.timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(opts.timeoutMs) }),
      })
      const text = await res.text()
      let parsed: unknown = null
      try {
        parsed = text ? JSON.parse(text) : null
      } catch {
        parsed = null
      }
      return { status: res.status, body: parsed, text }
    },
  }
  return svc
}
