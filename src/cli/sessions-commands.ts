import type { Command } from 'commander'
import { ok } from '../../sdk/src/index.ts'
import { clientCommand } from './command.ts'
import { out, printJson, printTable, when } from './print.ts'

const collect = (v: string, prev: string[] = []) => [...prev, v]

/** `key=value` pairs into a metadata object. */
function metadataOf(pairs: string[] | undefined): Record<string, string> | undefined {
  if (!pairs?.length) return undefined
  return Object.fromEntries(pairs.map((p) => {
    const at = p.indexOf('=')
    if (at <= 0) throw new Error(`--metadata wants key=value, got "${p}"`)
    return [p.slice(0, at), p.slice(at + 1)]
  }))
}

export function sessionsCommands(program: Command): void {
  const sessions = program.command('sessions').description('Create, list, show and delete sessions')

  clientCommand<{ title?: string; model?: string; approvalMode?: string; input?: string; metadata?: string[]; image?: string }>(sessions, 'create', 'Create a session; prints it', async (_args, o, { sdk, json }) => {
    const agent = o.model || o.approvalMode ? { ...(o.model ? { model: o.model } : {}), ...(o.approvalMode ? { approval_mode: o.approvalMode as 'auto' } : {}) } : undefined
    // The service checks the reference (a malformed one is its 400, printed as any refusal).
    const environment = o.image !== undefined ? { image: o.image } : undefined
    const s = await ok(sdk.api.POST('/v1/sessions', { body: { ...(o.title ? { title: o.title } : {}), ...(agent ? { agent } : {}), ...(environment ? { environment } : {}), ...(o.input ? { input: o.input } : {}), ...(o.metadata ? { metadata: metadataOf(o.metadata) } : {}) } }))
    if (json) printJson(s)
    else out(`${s.id}  ${s.status}${s.title ? `  ${s.title}` : ''}`)
  })
    .option('--title <text>', 'a title')
    .option('--model <name>', 'the model (default: the connection\'s first)')
    .option('--approval-mode <mode>', 'auto, ask or read_only')
    .option('--input <text>', 'an opening message')
    .option('--metadata <key=value>', 'a label (repeatable)', collect)
    .option('--image <ref>', "an OCI image the workspace runs on (host[:port]/name:tag or …@sha256:digest); default: the template's, the deployment's, or the host's system")

  clientCommand<{ status?: string; limit?: string; metadata?: string[] }>(sessions, 'list', 'List sessions, newest first', async (_args, o, { sdk, json }) => {
    const page = await ok(sdk.api.GET('/v1/sessions', { params: { query: { ...(o.limit ? { limit: Number(o.limit) } : {}), ...(o.status ? { status: o.status as 'idle' } : {}), ...(o.metadata ? { metadata: o.metadata } : {}) } } }))
    if (json) return printJson(page)
    printTable(['ID', 'STATUS', 'CREATED', 'TITLE'], page.data.map((s) => [s.id, s.status, when(s.created_at), s.title ?? '']))
    if (page.has_more) out(`… more: warren sessions list --limit 100`)
  })
    .option('--status <status>', 'only sessions in this status')
    .option('--limit <n>', '1 to 100 (default 20)')
    .option('--metadata <key:value>', 'only sessions with this label (repeatable)', collect)

  clientCommand(sessions, 'show <session>', 'Show a session', async ([id], _o, { sdk, json }) => {
    const s = await ok(sdk.api.GET('/v1/sessions/{session_id}', { params: { path: { session_id: id! } } }))
    if (json) return printJson(s)
    out(`${s.id}  ${s.status}${s.title ? `  ${s.title}` : ''}`)
    out(`created ${when(s.created_at)}  model ${s.agent?.model ?? '-'}`)
    out(`workspace ${s.environment.state}${s.environment.image ? `  image ${s.environment.image.ref} (${s.environment.image.digest ?? 'digest not resolved yet'})` : ''}`)
    for (const [k, v] of Object.entries(s.metadata ?? {})) out(`  ${k}=${v}`)
    for (const ra of s.required_actions ?? []) out(`waiting on function ${ra.name} (${ra.call_id})`)
    if (s.preview) out(`preview ${s.preview.url ?? '-'}`)
  })

  clientCommand(sessions, 'delete <session>', 'Delete a session and its workspace', async ([id], _o, { sdk, json }) => {
    const d = await ok(sdk.api.DELETE('/v1/sessions/{session_id}', { params: { path: { session_id: id! } } }))
    if (json) printJson(d)
    else out(`deleted ${d.id}`)
  })
}
