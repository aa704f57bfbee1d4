import http from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ApiError } from '../errors.ts'
import { isStoreUnreachable } from '../db/database.ts'
import { LostOwnership } from '../nodes/ownership.store.ts'
import { randomText } from '../shared/ids.ts'
import { describeValidation } from './validation.ts'

/** The id every answer carries in x-request-id (and error.request_id). */
export const newRequestId = (): string => `req_${randomText(20)}`

/** How long a refused connection may go on sending before it is cut. */
const DRAIN_MS = 5000
const answered = new WeakSet<Duplex>()

function send(reply: FastifyReply, req: FastifyRequest, err: ApiError): FastifyReply {
  for (const [k, v] of Object.entries(err.headers)) reply.header(k, v)
  return reply
    .code(err.status)
    .type('application/json; charset=utf-8')
    .send({ error: { code: err.code, message: err.message, request_id: String(req.id) } })
}

/** Turns anything thrown into the specification's error shape; nothing else ever leaves. */
function toApiError(error: FastifyError | ApiError | Error, req: FastifyRequest): ApiError {
  if (error instanceof ApiError) return error
  const fe = error as FastifyError & { validationContext?: string }
  if (fe.validation) return new ApiError('invalid_request', describeValidation(fe.validation as never, fe.validationContext ?? 'body', fe.validationContext === 'querystring' ? req.query : req.body))
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('invalid_request', 'The request body is over the size limit for this endpoint.')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError('invalid_request', 'Request bodies must be JSON (Content-Type: application/json).')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('invalid_request', 'The body is empty but Content-Type says JSON; send {} or no Content-Type.')
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ApiError('invalid_request', 'Content-Length does not match the body.')
  }
  if (fe.statusCode === 400 && error instanceof SyntaxError) return new ApiError('invalid_request', `The body is not valid JSON: ${error.message}`)
  if (error instanceof LostOwnership) {
    const where = error.owner ? `runs on node ${error.owner}, which cannot be reached from here now` : 'has just moved to another node'
    return new ApiError('sandbox_unavailable', `This session's workspace ${where}; retry shortly.`, { cause: error })
  }
  if (isStoreUnreachable(error)) {
    return new ApiError('directory_unavailable', 'The store cannot be reached; retry shortly.', { cause: error, headers: { 'retry-after': '5' } })
  }
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new ApiError('invalid_request', fe.message)
  }
  return new ApiError('internal_error', `Unexpected error; quote request id ${String(req.id)} when reporting it.`, { cause: error })
}

/**
 * Errors Fastify raises before any route or hook runs: a URL it cannot decode, a path parameter
 * over the router's length limit. Without this they leave in Fastify's own shape, without
 * x-request-id.
 */
export function frameworkErrorHandler(error: FastifyError, req: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-request-id', String(req.id))
  const path = (req.raw.url ?? '').split('?')[0]!
  const apiError =
    error.code === 'FST_ERR_BAD_URL'
      ? new ApiError('invalid_request', `The URL path "${path}" is not validly percent-encoded.`)
      : error.code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? new ApiError('not_found', `No endpoint or object at ${path}: a path segment is too long to be an id.`)
        : toApiError(error, req)
  send(reply, req, apiError)
}

/**
 * What Node's HTTP parser refuses before Fastify sees a request (headers over the size limit, a
 * malformed request line or header, a body cut short): answered in the error shape with an
 * x-request-id, where Fastify's default wrote its own shape without one.
 */
export function clientErrorHandler(this: FastifyInstance, err: Error & { code?: string }, socket: Duplex): void {
  // A reset peer is gone; a socket already answered gets a second report when the peer ends.
  if (err.code === 'ECONNRESET' || socket.destroyed || answered.has(socket)) return
  answered.add(socket)
  const response = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage
  if (!socket.writable || response?.headersSent) {
    socket.destroy()
    return
  }
  const message =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? `The request headers are over the ${Math.round(http.maxHeaderSize / 1024)} KiB limit.`
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 'The request did not arrive in time.'
        : err.code === 'HPE_INVALID_EOF_STATE'
          ? 'The connection ended before the request did (a body shorter than its Content-Length?).'
          : `The request is not valid HTTP/1.1 (${err.code ?? err.message}).`
  const apiError = new ApiError('invalid_request', message)
  const requestId = newRequestId()
  this.log.debug({ err, requestId }, 'refused by the HTTP parser')
  const body = JSON.stringify({ error: { code: apiError.code, message: apiError.message, request_id: requestId } })
  // The failed parser is fed no more, and what the client still sends is read and dropped: a
  // socket closed with unread bytes is reset, and a reset can cost the client this answer.
  socket.removeAllListeners('data')
  socket.resume()
  socket.end(
    `HTTP/1.1 ${apiError.status} ${http.STATUS_CODES[apiError.status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
  )
  const cut = setTimeout(() => socket.destroy(), DRAIN_MS)
  cut.unref()
  socket.once('close', () => clearTimeout(cut))
}

/** Compiles route patterns to tell an unknown path (404) from a known path with another method (405). */
export function installErrorHandlers(app: FastifyInstance): void {
  // Keyed by the pattern text as written: RegExp#source escapes "/" and so never equals it.
  const routes: { src: string; pattern: RegExp; methods: Set<string> }[] = []
  app.addHook('onRoute', (r) => {
    const src = '^' + r.url.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[A-Za-z_]+/g, '[^/]+') + '/?$'
    let entry = routes.find((x) => x.src === src)
    if (!entry) routes.push((entry = { src, pattern: new RegExp(src), methods: new Set() }))
    for (const m of [r.method].flat()) entry.methods.add(m)
  })

  app.setErrorHandler((error, req, reply) => {
    const apiError = toApiError(error as Error, req)
    if (apiError.status >= 500) req.log.error({ err: apiError.cause ?? error }, apiError.message)
    return send(reply, req, apiError)
  })

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0]!
    const known = routes.find((r) => r.pattern.test(path))
    if (known) {
      const allowed = [...known.methods].filter((m) => m !== 'HEAD').sort()
      reply.header('allow', allowed.join(', '))
      return send(reply, req, new ApiError('method_not_allowed', `${req.method} is not allowed on ${path}; use ${allowed.join(' or ')}.`))
    }
    return send(reply, req, new ApiError('not_found', `No endpoint ${req.method} ${path}.`))
  })
}
