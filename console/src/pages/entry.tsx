// One transcript entry; approvals, questions and caller functions are answered right here, and a
// refused answer (answered elsewhere first, its turn ended) is shown where it was given.
import { useState } from 'preact/hooks'
import { ok } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction } from '../hooks.ts'
import type { Entry } from '../transcript.ts'
import { ErrorLine, json } from '../ui.tsx'

export function EntryView({ entry, sessionId }: { entry: Entry; sessionId: string }) {
  switch (entry.kind) {
    case 'user':
      return <div class="entry user"><div class="bubble">{entry.text}</div></div>
    case 'text':
      return <div class={`entry agent${entry.streaming ? ' streaming' : ''}`} data-testid="agent-text">{entry.text}</div>
    case 'tool':
      return (
        <details class={`entry tool${entry.result?.isError ? ' failed' : ''}`} open={!entry.result}>
          <summary>
            <span class="tool-name">{entry.name}</span> <span class="mono small args">{argsLine(entry.args)}</span>
            <span class="tool-state">{!entry.result ? 'running…' : entry.result.cancelled ? 'cancelled' : entry.result.isError ? 'failed' : '✓'}</span>
          </summary>
          {entry.args !== undefined && <Args args={entry.args} />}
          {entry.result && <pre class="code result">{entry.result.summary}</pre>}
        </details>
      )
    case 'file':
      return (
        // A short diff is shown; a long one (a generated file, a lockfile) waits to be opened.
        <details class="entry file" open={!entry.diff || entry.diff.split('\n').length <= 40}>
          <summary><span class={`change change-${entry.change}`}>{entry.change}</span> <span class="mono">{entry.path}</span></summary>
          {entry.diff ? <Diff text={entry.diff} /> : null}
        </details>
      )
    case 'approval':
      return <Approval entry={entry} sessionId={sessionId} />
    case 'question':
      return <Question entry={entry} sessionId={sessionId} />
    case 'function':
      return <FunctionCall entry={entry} sessionId={sessionId} />
    case 'notice':
      return <div class={`entry notice ${entry.tone}`}>{entry.text}</div>
  }
}

function Diff({ text }: { text: string }) {
  return (
    <pre class="code diff">
      {text.split('\n').map((line, i) => (
        <span key={i} class={line.startsWith('+') && !line.startsWith('+++') ? 'add' : line.startsWith('-') && !line.startsWith('---') ? 'del' : line.startsWith('@@') ? 'hunk' : ''}>{line + '\n'}</span>
      ))}
    </pre>
  )
}

function Approval({ entry, sessionId }: { entry: Extract<Entry, { kind: 'approval' }>; sessionId: string }) {
  const sdk = useSdk()
  const action = useAction()
  const [reason, setReason] = useState('')
  const decide = (approved: boolean) =>
    action.run(() => ok(sdk.api.POST('/v1/sessions/{session_id}/approvals/{tool_call_id}', {
      params: { path: { session_id: sessionId, tool_call_id: entry.id } },
      body: { approved, ...(!approved && reason ? { reason } : {}) },
    })))
  return (
    <div class={`entry ask approval${entry.resolved ? ' done' : ''}`} data-testid="approval">
      <div class="ask-head">Allow <span class="tool-name">{entry.name}</span>?</div>
      <Args args={entry.args} />
      {entry.resolved ? (
        <div class="ask-result">{entry.resolved.approved ? 'Approved' : `Refused${entry.resolved.code ? ` (${entry.resolved.code.replace(/_/g, ' ')})` : ''}`}</div>
      ) : (
        <div class="ask-actions">
          <button class="primary" disabled={action.busy} onClick={() => decide(true)}>Approve</button>
          <input name="reason" placeholder="reason, told to the agent (optional)" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
          <button class="danger" disabled={action.busy} onClick={() => decide(false)}>Deny</button>
        </div>
      )}
      <ErrorLine error={action.error} />
    </div>
  )
}

function Question({ entry, sessionId }: { entry: Extract<Entry, { kind: 'question' }>; sessionId: string }) {
  const sdk = useSdk()
  const action = useAction()
  const [text, setText] = useState('')
  const answer = (value: string) =>
    action.run(() => ok(sdk.api.POST('/v1/sessions/{session_id}/questions/{tool_call_id}', { params: { path: { session_id: sessionId, tool_call_id: entry.id } }, body: { answer: value } })))
  return (
    <div class={`entry ask question${entry.answer !== undefined ? ' done' : ''}`} data-testid="question">
      <div class="ask-head">{entry.question}</div>
      {entry.answer !== undefined ? (
        <div class="ask-result">{entry.closed ? 'Closed unanswered: the turn ended' : `Answered: ${entry.answer}`}</div>
      ) : (
        <div class="ask-actions">
          {entry.options?.map((o) => <button key={o} disabled={action.busy} onClick={() => answer(o)}>{o}</button>)}
          {entry.freeform && (
            <form class="inline grow" onSubmit={(e) => (e.preventDefault(), text.trim() && answer(text))}>
              <input name="answer" class="grow" placeholder="Your answer" value={text} onInput={(e) => setText(e.currentTarget.value)} />
              <button type="submit" class="primary" disabled={action.busy}>Answer</button>
            </form>
          )}
        </div>
      )}
      <ErrorLine error={action.error} />
    </div>
  )
}

function FunctionCall({ entry, sessionId }: { entry: Extract<Entry, { kind: 'function' }>; sessionId: string }) {
  const sdk = useSdk()
  const action = useAction()
  const [output, setOutput] = useState('')
  const send = (failed: boolean) =>
    action.run(() => {
      // Output is any JSON; text that is not JSON is sent as a string.
      let value: unknown = output
      try {
        value = JSON.parse(output)
      } catch {}
      return ok(sdk.api.POST('/v1/sessions/{session_id}/required_actions/{call_id}', {
        params: { path: { session_id: sessionId, call_id: entry.id } },
        body: failed ? { error: output || 'failed' } : { output: value },
      }))
    })
  return (
    <div class={`entry ask function${entry.resolved ? ' done' : ''}`} data-testid="required-action">
      <div class="ask-head">Function <span class="tool-name">{entry.name}</span> needs your output</div>
      <pre class="code">{json(entry.args)}</pre>
      {entry.resolved ? (
        <div class="ask-result">{entry.resolved.closed ? 'Closed unanswered: the turn ended' : entry.resolved.success ? 'Output given' : 'Answered with an error'}</div>
      ) : (
        <div class="ask-actions">
          <textarea name="output" rows={2} class="grow" placeholder="output (JSON or text)" value={output} onInput={(e) => setOutput(e.currentTarget.value)} />
          <button class="primary" disabled={action.busy} onClick={() => send(false)}>Send output</button>
          <button class="danger" disabled={action.busy} onClick={() => send(true)}>Send as error</button>
        </div>
      )}
      <ErrorLine error={action.error} />
    </div>
  )
}

/** A tool's arguments: a shell command as the command line it is, anything else as JSON. */
function Args({ args }: { args: unknown }) {
  const command = commandOf(args)
  return command !== null ? <pre class="code args-block">$ {command}</pre> : <pre class="code args-block">{json(args)}</pre>
}

const commandOf = (args: unknown): string | null =>
  args && typeof args === 'object' && Object.keys(args).length === 1 && typeof (args as { command?: unknown }).command === 'string' ? (args as { command: string }).command : null

/** A tool's arguments on one line: a shell command as itself, anything else as compact JSON. */
function argsLine(args: unknown): string {
  if (args && typeof args === 'object' && 'command' in args && typeof (args as { command: unknown }).command === 'string') return (args as { command: string }).command
  const s = JSON.stringify(args) ?? ''
  return s.length > 120 ? `${s.slice(0, 117)}…` : s
}
