import fs from 'node:fs'
import path from 'node:path'
import type { Command } from 'commander'
import { ok } from '../../sdk/src/index.ts'
import { clientCommand } from './command.ts'
import { note, out, printJson, printTable, when } from './print.ts'

/** Writes bytes to `file`, or to stdout when it is `-`. */
function save(file: string, bytes: ArrayBuffer): void {
  if (file === '-') process.stdout.write(Buffer.from(bytes))
  else fs.writeFileSync(file, Buffer.from(bytes))
}

export function workspaceCommands(program: Command): void {
  const files = program.command('files').description("Files in a session's workspace")
  clientCommand(files, 'put <session> <local> [remote]', 'Upload a file into the workspace (at REMOTE, default its name)', async ([sid, local, remote], _o, { sdk, json }) => {
    const content = fs.readFileSync(local!).toString('base64')
    const res = await ok(sdk.api.POST('/v1/sessions/{session_id}/files', { params: { path: { session_id: sid! } }, body: { files: [{ path: remote ?? path.basename(local!), content }] } }))
    if (json) printJson(res)
    else out(`uploaded ${remote ?? path.basename(local!)}`)
  })

  const artifacts = program.command('artifacts').description("Files a session's turns published")
  clientCommand(artifacts, 'list <session>', "List a session's artifacts", async ([sid], _o, { sdk, json }) => {
    const page = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts', { params: { path: { session_id: sid! }, query: { limit: 100 } } }))
    if (json) return printJson(page)
    printTable(['ID', 'SIZE', 'CREATED', 'PATH'], page.data.map((a) => [a.id, String(a.size_bytes), when(a.created_at), a.path]))
  })
  clientCommand<{ output?: string }>(artifacts, 'get <session> <artifact>', "Download one artifact's bytes (to --output, default its file name; - for stdout)", async ([sid, aid], o, { sdk }) => {
    const list = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts', { params: { path: { session_id: sid! }, query: { limit: 100 } } }))
    const name = list.data.find((a) => a.id === aid)?.path
    const bytes = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts/{artifact_id}/content', { params: { path: { session_id: sid!, artifact_id: aid! } }, parseAs: 'arrayBuffer' }))
    const file = o.output ?? path.basename(name ?? aid!)
    save(file, bytes as ArrayBuffer)
    if (file !== '-') note(`saved ${file}`)
  }).option('-o, --output <file>', 'where to write (- for stdout)')
  clientCommand<{ output?: string }>(artifacts, 'archive <session>', 'Download every artifact as one tar (to --output, default SESSION.tar)', async ([sid], o, { sdk }) => {
    const bytes = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts/archive', { params: { path: { session_id: sid! } }, parseAs: 'arrayBuffer' }))
    const file = o.output ?? `${sid}.tar`
    save(file, bytes as ArrayBuffer)
    if (file !== '-') note(`saved ${file}`)
  }).option('-o, --output <file>', 'where to write (- for stdout)')

  const preview = program.command('preview').description("A session's preview address")
  clientCommand<{ port?: string; subdomain?: string }>(preview, 'open <session>', 'Publish a port the workspace serves; prints its address', async ([sid], o, { sdk, json }) => {
    const p = await ok(sdk.api.POST('/v1/sessions/{session_id}/preview', { params: { path: { session_id: sid! } }, body: { ...(o.port ? { port: Number(o.port) } : {}), ...(o.subdomain ? { subdomain: o.subdomain } : {}) } }))
    if (json) printJson(p)
    else out(p.url)
  })
    .option('--port <n>', 'the port (default: the one the workspace listens on)')
    .option('--subdomain <name>', 'the address name to ask for')
  clientCommand(preview, 'close <session>', 'Withdraw the preview', async ([sid], _o, { sdk, json }) => {
    const d = await ok(sdk.api.DELETE('/v1/sessions/{session_id}/preview', { params: { path: { session_id: sid! } } }))
    if (json) printJson(d)
    else out('preview closed')
  })

  clientCommand(program, 'usage <session>', "A session's sandbox time and model tokens", async ([sid], _o, { sdk, json }) => {
    const u = await ok(sdk.api.GET('/v1/sessions/{session_id}/usage', { params: { path: { session_id: sid! } } }))
    if (json) return printJson(u)
    for (const [k, v] of Object.entries(u)) if (k !== 'object') out(`${k}: ${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
  })
}
