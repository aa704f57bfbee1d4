import path from 'node:path'
import { ApiError } from '../errors.ts'
import { FILE_LIMITS, type FileInput } from './files.schema.ts'

export type DecodedFile = { path: string; mode: number; content: Buffer }

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

/** A workspace-relative path in normal form, or null when it is absolute or climbs out. */
export function normalizeWorkspacePath(p: string): string | null {
  if (p.includes('\0') || p.startsWith('/') || p.startsWith('\\')) return null
  const n = path.posix.normalize(p.replace(/\\/g, '/'))
  if (n === '.' || n === '..' || n.startsWith('../') || n.endsWith('/')) return null
  return n.replace(/^\.\//, '')
}

/**
 * Decodes and checks a request's files against the ceilings. All or nothing: any bad file refuses
 * the whole request, and nothing is truncated.
 */
export function decodeFiles(files: FileInput[], field: string): DecodedFile[] {
  if (files.length > FILE_LIMITS.filesPerRequest) {
    throw new ApiError('invalid_request', `${field}: at most ${FILE_LIMITS.filesPerRequest} files per request, got ${files.length}.`)
  }
  let total = 0
  const seen = new Set<string>()
  return files.map((f, i) => {
    const rel = normalizeWorkspacePath(f.path)
    if (rel === null) throw new ApiError('invalid_request', `${field}[${i}].path "${f.path}" must be relative and stay inside the workspace.`)
    if (seen.has(rel)) throw new ApiError('invalid_request', `${field}[${i}].path "${f.path}" is given twice.`)
    seen.add(rel)
    const text = f.content.replace(/\s+/g, '')
    if (!BASE64.test(text) || text.length % 4 === 1) throw new ApiError('invalid_request', `${field}[${i}].content is not valid base64.`)
    const content = Buffer.from(text, 'base64')
    if (content.length > FILE_LIMITS.perFileBytes) {
      throw new ApiError('invalid_request', `${field}[${i}] ("${f.path}") is ${content.length} bytes decoded; the limit is ${FILE_LIMITS.perFileBytes} bytes (5 MiB) per file.`)
    }
    total += content.length
    if (total > FILE_LIMITS.perRequestBytes) {
      throw new ApiError('invalid_request', `${field}: the files total more than ${FILE_LIMITS.perRequestBytes} bytes (10 MiB) decoded per request.`)
    }
    return { path: rel, mode: f.mode ?? 0o644, content }
  })
}
