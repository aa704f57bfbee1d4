import type { Sandbox } from '../sandbox/sandbox.ts'

/** /proc/net/tcp's state column for a listening socket. */
const LISTEN = '0A'
/** Addresses a preview reaches: every address, or the loopback the sandbox redirects previews to. */
const REACHABLE = new Set(['00000000', '0100007F', '00000000000000000000000000000000'])

/**
 * Ports processes in the sandbox listen on where a preview can reach them, lowest first. Read from
 * the kernel's socket tables as the sandbox itself sees them (its own network namespace), so it
 * works whatever the server is written in.
 */
export async function listeningPorts(sandbox: Sandbox): Promise<number[]> {
  const res = await sandbox.exec({ command: 'cat /proc/net/tcp /proc/net/tcp6 2>/dev/null', timeoutMs: 10_000 })
  return parseListeningPorts(res.stdout.toString('utf8'))
}

export function parseListeningPorts(table: string): number[] {
  const ports = new Set<number>()
  for (const line of table.split('\n')) {
    const cols = line.trim().split(/\s+/)
    if (cols[3] !== LISTEN) continue
    const [addr, port] = (cols[1] ?? '').split(':')
    if (addr === undefined || port === undefined || !REACHABLE.has(addr.toUpperCase())) continue
    const n = parseInt(port, 16)
    if (n > 0) ports.add(n)
  }
  return [...ports].sort((a, b) => a - b)
}
