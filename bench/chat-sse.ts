// The smallest OpenAI-compatible model a bench needs: a streamed chat completion written at once,
// so that what is timed is the service, not a fake model's pacing.
import type http from 'node:http'

/** One streamed chat-completion chunk. */
export const chatChunk = (delta: unknown, finish: string | null) => ({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })

/** Writes `chunks` as a server-sent stream and ends it; `ended` is told when the last byte is out. */
export function chatStream(res: http.ServerResponse, chunks: unknown[], ended: () => void): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  for (const c of chunks) res.write(`data: ${JSON.stringify(c)}\n\n`)
  res.end('data: [DONE]\n\n', ended)
}
