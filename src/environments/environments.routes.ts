import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { profileRoutes } from './profiles.routes.ts'
import { templateRoutes } from './templates.routes.ts'

/** Environment profiles (write-only variables) and templates (files, repo, setup, profiles). */
export const environmentRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  await app.register(profileRoutes, deps)
  await app.register(templateRoutes, deps)
}
