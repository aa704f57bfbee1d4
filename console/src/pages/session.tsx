// One session: the live transcript with what waits on a person answered in place, the composer,
// and beside them the turn queue, todos, artifacts, the preview and usage.
import { useEffect, useLayoutEffect, useReducer, useRef, useState } from 'preact/hooks'
import { getSession, ok, saveBlob, when, type Session } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { EMPTY, fold, waiting, type Transcript } from '../transcript.ts'
import { ErrorLine, Status } from '../ui.tsx'
import { EntryView } from './entry.tsx'

/** Events after which the side panels (session, turns, artifacts, usage) are read again. */
const REFRESH_ON = /^(turn\.|message\.|approval\.|question\.|tool\.|artifact\.|preview\.|sandbox\.)/

export function SessionPage({ id }: { id: string }) {
  const sdk = useSdk()
  const [transcript, dispatch] = useReducer(fold, EMPTY)
  const [stream, setStream] = useState<'connecting' | 'live' | 'reconnecting'>('connecting')
  const [streamError, setStreamError] = useState<string | null>(null)
  const [version, setVersion] = useState(0)
  const bump = () => setVersion((n) => n + 1)
  const session = useLoad(() => getSession(sdk, id), [id, version])
  // The last word on the image's pull, while the workspace waits on it.
  const [pull, setPull] = useState<ImagePull | null>(null)

  useEffect(() => {
    const abort = new AbortController()
    let timer: ReturnType<typeof setTimeout> | undefined
    ;(async () => {
      // From the first persisted event, then live; the SDK reconnects with Last-Event-ID on its own.
      const events = sdk.events({ sessionId: id, after: 0, signal: abort.signal, onOpen: () => setStream('live'), onReconnect: () => setStream('reconnecting') })
      for await (const e of events) {
        dispatch(e)
        if (e.type === 'sandbox.image_progress') setPull(e.payload)
        if (REFRESH_ON.test(e.type)) {
          clearTimeout(timer)
          timer = setTimeout(bump, 150)
        }
      }
    })().catch((err: Error) => !abort.signal.aborted && setStreamError(err.message))
    return () => {
      clearTimeout(timer)
      abort.abort()
    }
  }, [id])

  if (session.error && !session.data) return <ErrorLine error={session.error} />
  const s = session.data
  return (
    <section class="session">
      <header class="page-header">
        <div>
          <h1>{s?.title || 'Untitled session'}</h1>
          <p class="muted mono small">{id}</p>
        </div>
        <div class="actions">
          {s && <Status status={s.status} />}
          <span class={`stream stream-${stream}`} title="Event stream">{stream}</span>
        </div>
      </header>
      <ErrorLine error={streamError} />
      <div class="session-grid">
        <div class="main-column">
          <Conversation transcript={transcript} sessionId={id} />
          <Composer sessionId={id} onSent={bump} />
        </div>
        <aside class="side-column">
          {s && <Waiting transcript={transcript} session={s} />}
          {s && <Workspace session={s} pull={pull} />}
          <Turns sessionId={id} version={version} />
          <Todos transcript={transcript} />
          <Artifacts sessionId={id} version={version} />
          {s && <Preview session={s} onChange={bump} />}
          <Usage sessionId={id} version={version} />
        </aside>
      </div>
    </section>
  )
}

/** The transcript; it follows the bottom while the reader is there, and stays put when they scrolled up. */
function Conversation({ transcript, sessionId }: { transcript: Transcript; sessionId: string }) {
  const box = useRef<HTMLDivElement>(null)
  const atBottom = useRef(true)
  useLayoutEffect(() => {
    const el = box.current
    if (el && atBottom.current) el.scrollTop = el.scrollHeight
  }, [transcript])
  return (
    <div
      class="transcript"
      ref={box}
      data-testid="transcript"
      onScroll={(e) => {
        const el = e.currentTarget
        atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40
      }}
    >
      {transcript.entries.length === 0 && <p class="muted empty">Nothing yet. Send the agent a message.</p>}
      {transcript.entries.map((entry) => <EntryView key={entry.key} entry={entry} sessionId={sessionId} />)}
    </div>
  )
}

function Composer({ sessionId, onSent }: { sessionId: string; onSent: () => void }) {
  const sdk = useSdk()
  const [text, setText] = useState('')
  const action = useAction()
  const send = () =>
    void action.run(async () => {
      await ok(sdk.api.POST('/v1/sessions/{session_id}/messages', { params: { path: { session_id: sessionId } }, body: { text } }))
      setText('')
      onSent()
    })
  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault()
        if (text.trim()) send()
      }}
    >
      <textarea
        name="message"
        rows={3}
        placeholder="Message the agent (Ctrl+Enter to send). While it works, a message waits in the queue."
        value={text}
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && text.trim()) {
            e.preventDefault()
            send()
          }
        }}
      />
      <div class="composer-bar">
        <ErrorLine error={action.error} />
        <button type="submit" class="primary" disabled={action.busy || !text.trim()}>Send</button>
      </div>
    </form>
  )
}

function Waiting({ transcript, session }: { transcript: Transcript; session: Session }) {
  const count = waiting(transcript).length
  if (count === 0 && session.status !== 'requires_action') return null
  return (
    <div class="panel attention">
      <h2>Waiting on you</h2>
      <p>{count > 0 ? `${count} request${count > 1 ? 's' : ''} in the transcript need an answer.` : 'The session needs an action.'}</p>
    </div>
  )
}

function Turns({ sessionId, version }: { sessionId: string; version: number }) {
  const sdk = useSdk()
  const turns = useLoad(() => ok(sdk.api.GET('/v1/sessions/{session_id}/turns', { params: { path: { session_id: sessionId }, query: { limit: 10 } } })), [sessionId, version])
  const action = useAction()
  // Newest first from the API; the queue reads in the order it runs: the running turn, then the waiting ones.
  const open = turns.data?.data.filter((t) => t.status === 'working').reverse() ?? []
  const recent = turns.data?.data.filter((t) => t.status !== 'working').slice(0, 3) ?? []
  return (
    <div class="panel">
      <h2>Turns</h2>
      <ErrorLine error={turns.error ?? action.error} />
      {open.length === 0 && <p class="muted small">No turn running or queued.</p>}
      <ul class="rows">
        {open.map((t) => (
          <li key={t.id} data-testid="open-turn">
            <span class="badge status-working">{t.started_at ? 'running' : 'queued'}</span>
            <span class="mono small">{t.id}</span>
            <button class="small danger" disabled={action.busy} onClick={() => action.run(async () => {
              await ok(sdk.api.POST('/v1/sessions/{session_id}/turns/{turn_id}/cancel', { params: { path: { session_id: sessionId, turn_id: t.id } } }))
              turns.reload()
            })}>Cancel</button>
          </li>
        ))}
        {recent.map((t) => (
          <li key={t.id} class="muted">
            <Status status={t.status} />
            <span class="mono small">{t.id}</span>
            {t.error && <span class="small error-text">{t.error.message}</span>}
          </li>
        ))}
      </ul>
    </div>
  )
}

function Todos({ transcript }: { transcript: Transcript }) {
  if (transcript.todos.length === 0) return null
  return (
    <div class="panel">
      <h2>Todos</h2>
      <ul class="todos">
        {transcript.todos.map((t, i) => <li key={i} class={`todo todo-${t.status}`}><span class="todo-mark" aria-hidden="true" />{t.label}</li>)}
      </ul>
    </div>
  )
}

function Artifacts({ sessionId, version }: { sessionId: string; version: number }) {
  const sdk = useSdk()
  const list = useLoad(() => ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts', { params: { path: { session_id: sessionId }, query: { limit: 100 } } })), [sessionId, version])
  const action = useAction()
  const path = { session_id: sessionId }
  const items = list.data?.data ?? []
  return (
    <div class="panel">
      <h2>Artifacts</h2>
      <ErrorLine error={list.error ?? action.error} />
      {items.length === 0 && <p class="muted small">None published yet.</p>}
      <ul class="rows">
        {items.map((a) => (
          <li key={a.id}>
            <span class="mono small grow" title={a.path}>{a.path}</span>
            <span class="muted small">{formatBytes(a.size_bytes)}</span>
            <button class="small" onClick={() => action.run(async () => {
              const blob = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts/{artifact_id}/content', { params: { path: { ...path, artifact_id: a.id } }, parseAs: 'blob' }))
              saveBlob(blob as Blob, a.path.split('/').pop() || a.id)
            })}>Download</button>
          </li>
        ))}
      </ul>
      {items.length > 0 && (
        <button class="small" onClick={() => action.run(async () => {
          const blob = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts/archive', { params: { path }, parseAs: 'blob' }))
          saveBlob(blob as Blob, `${sessionId}.tar`)
        })}>Download all (tar)</button>
      )}
    </div>
  )
}

type ImagePull = { ref: string; bytes: number; totalBytes: number; layers: number; layersLeft: number }

/** Where the agent works: the workspace's state and the image it runs on (with its pull while it comes). */
function Workspace({ session, pull }: { session: Session; pull: ImagePull | null }) {
  const env = session.environment
  return (
    <div class="panel">
      <h2>Workspace</h2>
      <dl class="facts">
        <dt>State</dt><dd>{env.state}</dd>
        <dt>Image</dt>
        <dd class="mono small" data-testid="workspace-image">{env.image ? env.image.ref : "the host's system"}</dd>
        {env.image && (
          <>
            <dt>Digest</dt><dd class="mono small clip" title={env.image.digest ?? ''}>{env.image.digest ?? 'not resolved yet'}</dd>
          </>
        )}
        {env.state === 'pending' && pull && (
          <>
            <dt>Pulling</dt><dd>{formatBytes(pull.bytes)} of {formatBytes(pull.totalBytes)}, {pull.layersLeft} of {pull.layers} layers left</dd>
          </>
        )}
      </dl>
    </div>
  )
}

function Preview({ session, onChange }: { session: Session; onChange: () => void }) {
  const sdk = useSdk()
  const [port, setPort] = useState('')
  const action = useAction()
  const path = { session_id: session.id }
  const published = session.preview?.published_url ?? session.preview?.url ?? null
  return (
    <div class="panel">
      <h2>Preview</h2>
      <ErrorLine error={action.error} />
      {published ? (
        <div class="rows">
          {/* A new tab with no way back to this one (noopener): the site is the workspace's, not ours. */}
          <a class="button" href={published} target="_blank" rel="noopener noreferrer">Open preview ↗</a>
          <button class="small ghost" onClick={() => action.run(async () => (await ok(sdk.api.DELETE('/v1/sessions/{session_id}/preview', { params: { path } })), onChange()))}>Close</button>
        </div>
      ) : (
        <form class="inline" onSubmit={(e) => {
          e.preventDefault()
          void action.run(async () => {
            await ok(sdk.api.POST('/v1/sessions/{session_id}/preview', { params: { path }, body: port ? { port: Number(port) } : {} }))
            onChange()
          })
        }}>
          <input name="port" inputMode="numeric" placeholder="port (default: the one it listens on)" value={port} onInput={(e) => setPort(e.currentTarget.value)} />
          <button type="submit" class="small" disabled={action.busy}>Publish</button>
        </form>
      )}
    </div>
  )
}

function Usage({ sessionId, version }: { sessionId: string; version: number }) {
  const sdk = useSdk()
  const usage = useLoad(() => ok(sdk.api.GET('/v1/sessions/{session_id}/usage', { params: { path: { session_id: sessionId } } })), [sessionId, version])
  const u = usage.data
  return (
    <div class="panel">
      <h2>Usage</h2>
      <ErrorLine error={usage.error} />
      {u && (
        <dl class="facts">
          <dt>Sandbox time</dt><dd>{formatSeconds(u.sandbox_seconds)}</dd>
          <dt>Chargeable</dt><dd>{formatSeconds(u.chargeable_seconds)}</dd>
          <dt>As of</dt><dd>{when(u.as_of)}</dd>
        </dl>
      )}
    </div>
  )
}

const formatBytes = (n: number) => (n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`)
const formatSeconds = (s: number) => (s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${(s / 3600).toFixed(1)} h`)
