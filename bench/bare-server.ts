import Fastify from 'fastify'

// The baseline: a bare Fastify route returning a fixed JSON object, nothing else.
const app = Fastify({ logger: false })
const body = { object: 'session', id: 'ses_0000', status: 'idle', title: '', metadata: {} }
app.get('/bare', async () => body)
const address = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) })
process.stdout.write(address + '\n')
