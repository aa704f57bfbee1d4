// Runs one of the repository's check scripts (scripts/*.ts) as CI does, on this tree or another.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { NODE, ROOT } from './service-process.ts'

export function runScript(name: string, src?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const script = path.join(ROOT, 'scripts', name)
  return new Promise((resolve) =>
    execFile(NODE, [script, ...(src ? [src] : [])], { timeout: 60_000 }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr })),
  )
}
