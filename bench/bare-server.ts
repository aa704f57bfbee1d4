import Fastify from 'fastify'

// The baseline: a bare Fastify route returning a fixed JSON object, nothing else. The object is
// shaped and sized like the session bench/api reads (about 700 bytes), so that both answers cost
// the same to write; what the ratio measures is Warren's own work.
const app = Fastify({ logger: false })
const body = {
  object: 'session',
  id: 'ses_000000000000000000000000',
  status: 'idle',
  created_at: 1795625218937,
  updated_at: 1795625219281,
  agent: {
    id: 'agt_000000000000000000000000',
    model: 'gpt-bench',
    model_credential_id: 'mc_000000000000000000000000',
    approval_mode: 'auto',
    instructions: '',
    permission_rules: [],
    tools: [{ type: 'web_fetch' }, { type: 'browse' }, { type: 'browser_act' }, { type: 'screenshot' }],
  },
  environment: { type: 'sandbox', state: 'running', workspace_directory: '/workspace', repo: null, profiles: [], template: null },
  preview: { url: null, published_url: null, port: null },
  title: 'bench',
  source: 'api',
  created_by_token: 'tok_000000000000000000000000',
  required_actions: [],
  metadata: { k: 'v' },
}
app.get('/bare', async () => body)
const address = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) })
process.stdout.write(address + '\n')
