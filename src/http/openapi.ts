import type { SwaggerOptions } from '@fastify/swagger'
import type { Config } from '../config.ts'
import { bodyRequired } from './validation.ts'

/**
 * How @fastify/swagger builds GET /v1/openapi.json from the route table: the route schemas are the
 * description, and what is written here is only what no route can say about itself.
 */
export function openApiOptions(config: Config): SwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Warren', version: 'v1', description: 'Runs coding agents remotely, on your own machines.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'A personal access token, svc_pat_…' } } },
      security: [{ bearer: [] }],
    },
    transformObject: (document) => {
      const openapiObject = 'openapiObject' in document ? document.openapiObject : {}
      // Read when the document is first built, after the listener has settled its port.
      openapiObject.servers = [{ url: config.publicUrl, description: 'This service (WARREN_PUBLIC_URL)' }]
      // The plugin marks every body required, but one whose fields are all optional may be left out.
      for (const item of Object.values(openapiObject.paths ?? {})) {
        for (const op of Object.values(item ?? {}) as { requestBody?: { required?: boolean; content?: Record<string, { schema?: unknown }> } }[]) {
          if (op?.requestBody) op.requestBody.required = bodyRequired(op.requestBody.content?.['application/json']?.schema)
        }
      }
      return openapiObject
    },
  }
}
