import type { FastifyReply } from 'fastify'

/**
 * For a route that answers 200 with objects a read cache hands out again and again (the same
 * object until the store changes): each object is serialized once, through the route's own 200
 * schema as Fastify would, and its text is sent again while that object is served. One sender a
 * route, so that an object never reuses text made by another route's schema. Text sent this way
 * skips preSerialization hooks (there are none); onSend and onResponse hooks run as usual.
 */
export function keptBodySender(): (reply: FastifyReply, value: object) => void {
  const bodies = new WeakMap<object, string>()
  return (reply, value) => {
    let body = bodies.get(value)
    if (body === undefined) bodies.set(value, (body = reply.serializeInput(value as Record<string, unknown>, '200') as string))
    reply.header('content-type', 'application/json; charset=utf-8').send(body)
  }
}
