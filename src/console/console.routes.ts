// The web console at /console: public static files (the sign-in happens in the page, with a token
// the page keeps), under a strict Content-Security-Policy. Not an API operation, so not described.
import type { FastifyPluginAsync, FastifyReply } from 'fastify'
import { readConsoleFile } from './read-console-file.ts'

/** Only this origin's own files and API; no inline script or style; never framed (no clickjacking of approvals). */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ')

const HEADERS = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
}

export const consoleRoutes: FastifyPluginAsync<{ dist?: string }> = async (app, { dist }) => {
  const serve = async (rest: string, reply: FastifyReply) => {
    reply.headers(HEADERS)
    const file = await readConsoleFile(rest, dist)
    return reply.code(file.status).type(file.type).header('cache-control', file.cacheControl).send(file.body)
  }
  const options = { config: { public: true }, schema: { hide: true } }
  app.get('/console', options, async (_req, reply) => serve('', reply))
  app.get<{ Params: { '*': string } }>('/console/*', options, async (req, reply) => serve(req.params['*'], reply))
}
