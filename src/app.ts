import http from 'node:http'
import Fastify, { type FastifyContextConfig, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify'
import swagger from '@fastify/swagger'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type, type TObject } from 'typebox'
import type { Deps } from './deps.ts'
import { fileRoutes } from './workspaces/files.routes.ts'
import { authHook } from './http/auth.ts'
import { onOwnersNode, previewOwners } from './http/forward-to-owner.ts'
import { IdempotencyKeyHeader, idempotencyOnSend, idempotencyPreHandler } from './http/idempotency.ts'
import { clientErrorHandler, frameworkErrorHandler, installErrorHandlers, newRequestId } from './http/error-handler.ts'
import { bodyRequired, validatorCompiler } from './http/validation.ts'
import { openApiOptions } from './http/openapi.ts'
import { ApiError, errorResponse } from './errors.ts'
import { MIB } from './http/limits.ts'
import { lazyChildLogger } from './http/request-logger.ts'
import { checkBody, refuseNulInUrl } from './http/hostile-input.ts'
import { healthRoutes } from './tokens/health.routes.ts'
import { tokenRoutes } from './tokens/tokens.routes.ts'
import { sessionRoutes } from './sessions/sessions.routes.ts'
import { itemRoutes } from './events/items.routes.ts'
import { eventStreamRoutes } from './events/event-streams.routes.ts'
import { artifactRoutes } from './artifacts/artifacts.routes.ts'
import { usageRoutes } from './usage/usage.routes.ts'
import { modelCredentialRoutes } from './models/models.routes.ts'
import { agentRoutes } from './agents/agents.routes.ts'
import { webhookRoutes } from './webhooks/webhooks.routes.ts'
import { environmentRoutes } from './environments/environments.routes.ts'
import { turnRoutes } from './turns/turns.routes.ts'
import { answerRoutes } from './turns/answers.routes.ts'
import { previewRoutes } from './previews/previews.routes.ts'
import { toolRoutes } from './tools/tools.routes.ts'
import { previewGateway } from './previews/preview-gateway.ts'
import { metricsRoutes } from './http/metrics.routes.ts'
import { countPreviewRequest } from './http/request-metrics.ts'
import { consoleRoutes } from './console/console.routes.ts'
import type { Log } from './shared/log.ts'

/** `log`: where parts made before the app (the preview gateway) tell what failed; the app's own logger is `logger`. */
export type AppDeps = Omit<Deps, 'previews'> & { logger?: FastifyServerOptions['logger']; log?: Log }

const EmptyQuery = Type.Object({}, { additionalProperties: false })

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const previews = previewGateway({
    ...deps,
    owners: previewOwners(deps.node),
  })
  const app = Fastify({
    // Requests for a preview host are served before the API's router sees them (preview-gateway.ts).
    serverFactory: (handler) => {
      const server = http.createServer((req, res) => {
        if (previews.handleRequest(req, res)) countPreviewRequest(deps.metrics, req, res)
        else handler(req, res)
      })
      server.on('upgrade', (req, socket, head) => previews.handleUpgrade(req, socket, head))
      return server
    },
    logger: deps.logger ?? false,
    ...(deps.logger ? { childLoggerFactory: lazyChildLogger } : {}),
    bodyLimit: MIB,
    genReqId: newRequestId,
    requestIdHeader: false,
    return503OnClosing: false,
    routerOptions: { ignoreTrailingSlash: true },
    ajv: { customOptions: { removeAdditional: false } },
    frameworkErrors: frameworkErrorHandler,
    clientErrorHandler,
  }).withTypeProvider<TypeBoxTypeProvider>()

  app.setValidatorCompiler(validatorCompiler)
  // Callback-style hooks on every request (here and below): an async hook costs each request a
  // promise and a microtask hop even when it has nothing to wait for.
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', String(req.id))
    done()
  })
  // By the route's pattern (a 404 has none): the raw URL would make a series per session id.
  app.addHook('onResponse', (req, reply, done) => {
    deps.metrics.request(req.routeOptions.url ?? 'unmatched', req.method, reply.statusCode, reply.elapsedTime)
    done()
  })
  installErrorHandlers(app)

  const authenticateFor = authHook(deps.store, deps.config, (headers) => deps.node.passedOn(headers))
  const claimKey = idempotencyPreHandler(deps.store, deps.box, () => deps.node.id)
  const recordAnswer = idempotencyOnSend(deps.store, deps.box)
  const toOwnersNode = onOwnersNode({ store: deps.store, node: deps.node })
  // Every route gets the same guards: a token (unless public), closed query strings, a refusal of
  // any body field the route does not read, no NUL in ids, query values or body text, a ceiling on
  // the nesting of free-form JSON, and Idempotency-Key where the route accepts it.
  app.addHook('onRoute', (route) => {
    const cfg = (route.config ?? {}) as FastifyContextConfig
    const names = `${[route.method].flat().join(',')} ${route.url}`
    // Fail closed: a route that forgot its scope would otherwise take any valid token.
    if (!cfg.public && !cfg.anyToken && !cfg.scope) {
      throw new Error(`Route ${names} declares no scope: give it config.scope, config.anyToken or config.public.`)
    }
    // Fail closed as well: a route acting on a workspace on whichever node it reaches would bring a
    // second sandbox of it up there.
    const underSession = route.url.includes(':session_id')
    if (underSession && cfg.onOwnersNode === undefined) {
      throw new Error(`Route ${names} does not say whether it acts on the session's workspace: give it config.onOwnersNode (true, false, or a function of the request).`)
    }
    if (!underSession && cfg.onOwnersNode) throw new Error(`Route ${names} runs on a session's owner but names no session (:session_id).`)
    // Before the idempotency claim and the body check are put ahead of it: those run on the node
    // the caller reached, which keeps the answer under the caller's key.
    if (cfg.onOwnersNode) route.preHandler = [toOwnersNode(cfg.onOwnersNode), ...[route.preHandler ?? []].flat()]
    const schema = (route.schema ??= {})
    if (!schema.querystring) schema.querystring = EmptyQuery
    if (!cfg.public) route.onRequest = [authenticateFor(cfg), ...[route.onRequest ?? []].flat()]
    if (cfg.passThrough) {
      // The preview proxy's: what it carries is the site's own.
    } else if (!schema.body && route.method !== 'GET' && route.method !== 'HEAD') {
      route.preValidation = [refuseBodyFields, ...[route.preValidation ?? []].flat()]
    } else if (route.method === 'GET') {
      // Fastify never parses a GET body, so without this one would be ignored, not refused.
      route.preValidation = [refuseGetBody, ...[route.preValidation ?? []].flat()]
    }
    if (schema.body && !bodyRequired(schema.body)) route.preValidation = [readMissingBodyAsEmpty, ...[route.preValidation ?? []].flat()]
    if (cfg.idempotent) {
      // Described for the OpenAPI document; the rules themselves are enforced by claimKey.
      // Written as the specification spells it (Fastify matches header names in any case), and
      // added to the headers a route describes itself.
      const own = schema.headers as TObject | undefined
      schema.headers = Type.Object({ ...own?.properties, 'Idempotency-Key': IdempotencyKeyHeader })
      route.preHandler = [claimKey, ...[route.preHandler ?? []].flat()]
      route.onSend = [recordAnswer, ...[route.onSend ?? []].flat()]
    }
    if (schema.body && !cfg.passThrough) {
      // After validation, so an unknown field is still refused by name; before the idempotency
      // fingerprint and the stores, which JSON.stringify the body and bind its strings.
      const body = schema.body
      route.preHandler = [async (req: FastifyRequest) => checkBody(req.body, body), ...[route.preHandler ?? []].flat()]
    }
    route.preValidation = [refuseNulInUrl(cfg.passThrough === true), ...[route.preValidation ?? []].flat()]
  })

  await app.register(swagger, openApiOptions(deps.config))

  app.get(
    '/v1/openapi.json',
    {
      config: { public: true },
      schema: {
        operationId: 'getOpenApi',
        tags: ['meta'],
        summary: 'This description of the running interface; needs no token',
        security: [],
        response: { 200: Type.Object({}, { additionalProperties: true, description: 'An OpenAPI 3.1 document' }), 400: errorResponse(400), 500: errorResponse(500) },
      },
    },
    async () => app.swagger(),
  )
  // Here only when WARREN_METRICS_PORT=main; otherwise on a listener of their own (assemble.ts).
  if (deps.config.metricsPort === undefined) await app.register(metricsRoutes, { metrics: deps.metrics })

  // The web console's static files (console/): a page for people, on the public API below.
  await app.register(consoleRoutes)

  app.addHook('preClose', async () => previews.close())
  const opts = { store: deps.store, bus: deps.bus, config: deps.config, box: deps.box, workspaces: deps.workspaces, runner: deps.runner, node: deps.node, blobs: deps.blobs, previews, metrics: deps.metrics, host: deps.host }
  await app.register(
    async (v1) => {
      await v1.register(healthRoutes, opts)
      await v1.register(tokenRoutes, opts)
      await v1.register(sessionRoutes, opts)
      await v1.register(itemRoutes, opts)
      await v1.register(eventStreamRoutes, opts)
      await v1.register(artifactRoutes, opts)
      await v1.register(usageRoutes, opts)
      await v1.register(fileRoutes, opts)
      await v1.register(modelCredentialRoutes, opts)
      await v1.register(agentRoutes, opts)
      await v1.register(webhookRoutes, opts)
      await v1.register(environmentRoutes, opts)
      await v1.register(turnRoutes, opts)
      await v1.register(answerRoutes, opts)
      await v1.register(previewRoutes, opts)
      await v1.register(toolRoutes, opts)
    },
    { prefix: '/v1' },
  )
  return app
}

// A request with no body at all (no Content-Type, no length) reaches validation as undefined.
async function readMissingBodyAsEmpty(req: FastifyRequest): Promise<void> {
  if (req.body === undefined) req.body = {}
}

function refuseGetBody(req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void {
  const length = req.headers['content-length']
  if (req.headers['transfer-encoding'] === undefined && (length === undefined || length === '0')) return done()
  readGetBody(req).then(() => done(), done)
}

async function readGetBody(req: FastifyRequest): Promise<void> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req.raw as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > MIB) throw new ApiError('invalid_request', 'The request body is over the size limit for this endpoint.')
    chunks.push(chunk)
  }
  const text = Buffer.concat(chunks).toString('utf8')
  if (text.trim() === '') return
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw new ApiError('invalid_request', 'This endpoint reads no body; send none.')
  }
  if (body && typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0) return
  await refuseBodyFields({ body })
  throw new ApiError('invalid_request', 'This endpoint reads no body; send none.')
}

async function refuseBodyFields(req: { body: unknown }): Promise<void> {
  const body = req.body
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const first = Object.keys(body)[0]
    if (first !== undefined) throw new ApiError('invalid_request', `Unknown field "${first}": this endpoint reads no body.`)
  }
}
