import type { ChildProcess } from 'node:child_process'

/** The base URL a server child prints when it listens (`warren: listening on http://…`); rejects if it exits first. */
export function listeningUrl(child: ChildProcess, what = 'the server'): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (m) resolve(m[1]!)
    })
    child.on('exit', (code) => reject(new Error(`${what} exited with ${code}: ${out}`)))
  })
}
