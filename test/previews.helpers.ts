// Helpers for preview tests: the fixture site started by the agent's own bash tool, and raw
// requests to the service's address under a preview host name (no DNS needed for *.localhost).
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { createHash, randomBytes } from 'node:crypto'
import type { FakeModelServer } from './fakes/model-server.ts'
import type { client } from './turns.helpers.ts'

const SITE = fs.readFileSync(new URL('./fixtures/preview-site.cjs', import.meta.url))

/** The bash command that writes the fixture site into the workspace and starts it in the background. */
export function startSiteCommand(port: number, address = '127.0.0.1', name = 'site'): string {
  const log = `site-${port}.log`
  return [
    `echo ${SITE.toString('base64')} | base64 -d > site.cjs`,
    `(nohup node site.cjs ${port} ${address} ${name} > ${log} 2>&1 &)`,
    `for i in $(seq 1 100); do grep -q listening ${log} && break; sleep 0.1; done`,
    `cat ${log}`,
  ].join(' && ')
}

/** Has the session's agent run these bash commands (one step each) and waits for the turn. */
export async function agentRuns(c: ReturnType<typeof client>, fake: FakeModelServer, sid: string, ...commands: string[]) {
  fake.script(...commands.map((command) => ({ toolCalls: [{ name: 'bash', args: { command } }] })), { text: 'Started.' })
  const turn = await c.accept(sid, 'start the site')
  return c.settled(sid, turn.id, 60_000)
}

export type Answer = { status: number; headers: http.IncomingHttpHeaders; body: string }

/** A request to the service at `base` for the given Host. */
export function hostRequest(base: string, host: string, path: string, opts: { method?: string; headers?: Record<string, string>; body?: string; agent?: http.Agent } = {}): Promise<Answer> {
  const u = new URL(base)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: opts.method ?? 'GET', headers: { host, ...opts.headers }, agent: opts.agent }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (d: string) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(opts.body)
  })
}

/** A WebSocket client on a raw socket: opens with the given Host, sends text, reads text frames. */
export async function openWebSocket(base: string, host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; send(text: string): void; next(): Promise<string>; closed: Promise<void>; close(): void; head: string }> {
  const u = new URL(base)
  const socket = net.connect({ host: u.hostname, port: Number(u.port) })
  const key = randomBytes(16).toString('base64')
  socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`)
  let buf = Buffer.alloc(0)
  const frames: string[] = []
  const waiters: ((s: string) => void)[] = []
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  let head = ''
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject)
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d])
      const end = buf.indexOf('\r\n\r\n')
      if (end < 0) return
      head = buf.subarray(0, end).toString('latin1')
      buf = buf.subarray(end + 4)
      socket.off('data', onData)
      resolve()
    }
    socket.on('data', onData)
    socket.once('close', () => resolve())
  })
  const status = Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0)
  if (status === 101) {
    const accept = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
    if (!head.toLowerCase().includes(`sec-websocket-accept: ${accept.toLowerCase()}`)) throw new Error(`bad accept in ${head}`)
  }
  const drain = () => {
    while (buf.length >= 2 && buf.length >= 2 + (buf[1]! & 0x7f)) {
      const len = buf[1]! & 0x7f
      const text = buf.subarray(2, 2 + len).toString('utf8')
      buf = buf.subarray(2 + len)
      const w = waiters.shift()
      if (w) w(text)
      else frames.push(text)
    }
  }
  socket.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d])
    drain()
  })
  drain()
  return {
    status,
    head,
    send(text) {
      const data = Buffer.from(text)
      const mask = randomBytes(4)
      const masked = Buffer.from(data.map((b, i) => b ^ mask[i % 4]!))
      socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | data.length]), mask, masked]))
    },
    next: () => {
      const f = frames.shift()
      return f !== undefined ? Promise.resolve(f) : new Promise((resolve) => waiters.push(resolve))
    },
    closed,
    close: () => socket.destroy(),
  }
}
