import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'

export const webhookRoutes: FastifyPluginAsyncTypebox<Deps> = async () => {}
