import path from 'node:path'

export type Resolved = { ok: true; path: string } | { ok: false; error: string }

/**
 * A path the model gave, relative to the workspace or absolute under the mount, as a
 * workspace-relative path ('' for the workspace itself). Lexical only: `..` that stays inside is
 * fine, anything ending outside is refused here, and symlinks are left to the sandbox's file
 * access (which refuses them) or to the sandbox itself (commands run confined anyway).
 */
export function workspacePath(raw: string, mount: string): Resolved {
  if (raw.includes('\0')) return { ok: false, error: 'the path holds a NUL byte' }
  if (raw.trim() === '') return { ok: false, error: 'the path is empty' }
  const abs = path.posix.resolve(mount, raw)
  if (abs === mount) return { ok: true, path: '' }
  if (abs.startsWith(`${mount}/`)) return { ok: true, path: abs.slice(mount.length + 1) }
  return { ok: false, error: `${raw} is outside the workspace; paths must stay under ${mount}` }
}

/** How a workspace-relative path is shown to the model: as the tools accept it back. */
export const shown = (rel: string) => (rel === '' ? '.' : rel)
