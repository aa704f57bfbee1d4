import { Command, InvalidArgumentError } from 'commander'
import { clientCommands } from './cli/client-commands.ts'
import { loadConfig, type Config } from './config.ts'
import type { Store } from './db/database.ts'
import { SCOPES, TOKEN_LIFETIMES_DAYS, type Scope } from './tokens/scopes.ts'

// The service's modules load only for the commands that run the service or open its store: the
// client commands (sessions, send, …) talk HTTP and should start at once.
const service = {
  database: () => import('./db/database.ts'),
  server: () => import('./server.ts'),
  tokens: () => import('./tokens/tokens.store.ts'),
  keys: async () => ({ ...(await import('./shared/encryption-key.ts')), ...(await import('./shared/reseal-secrets.ts')) }),
}

// The only reader of process.env: everything else receives its Config.
const config = () => loadConfig(process.env)

/**
 * Runs one command on the configured store and closes it. Which store that is goes to stderr
 * (stdout stays the command's one JSON line): a store other than the service's would otherwise
 * only show as a token the service refuses.
 */
async function withStore(run: (store: Store, cfg: Config, where: string) => Promise<void>): Promise<void> {
  const cfg = config()
  const { openStore, storeLocation } = await service.database()
  const store = await openStore({ dataDir: cfg.dataDir, databaseUrl: cfg.databaseUrl })
  try {
    await run(store, cfg, storeLocation(cfg))
  } finally {
    await store.close()
  }
}

const program = new Command('warren').description('Warren: runs coding agents remotely, on your own machines.')

program
  .command('serve')
  .description('Run the HTTP service')
  .action(async () => {
    const { startServer } = await service.server()
    const server = await startServer(config())
    const addr = server.server.address()
    const where = typeof addr === 'object' && addr ? `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}` : String(addr)
    const stop = async () => {
      await server.close()
      process.exit(0)
    }
    // Before the line that says it listens: whoever waits for that line (a supervisor, a test)
    // may signal at once, and a SIGTERM that came before the handler killed the process outright,
    // leaving its warm cgroups and sandboxes behind and its sessions unsaved.
    process.once('SIGINT', stop)
    process.once('SIGTERM', stop)
    process.stdout.write(`warren: listening on ${where}\n`)
  })

const tokens = program.command('tokens').description('Mint and revoke access tokens')

tokens
  .command('create')
  .description('Mint a token (creating the organization when missing); prints one JSON line')
  .requiredOption('--org <name>', 'organization name', (v: string) => {
    if (v.trim() === '') throw new InvalidArgumentError('the organization name must not be empty')
    return v
  })
  .option('--name <name>', 'a label for the token')
  .option('--scopes <list>', 'comma-separated scopes (default: all)', (v: string) => {
    // A repeated scope is one scope, as over HTTP (where a repeat is refused).
    const list = [...new Set(v.split(',').map((s) => s.trim()).filter(Boolean))]
    const bad = list.filter((s) => !(SCOPES as readonly string[]).includes(s))
    if (list.length === 0) throw new InvalidArgumentError(`give at least one scope; known: ${SCOPES.join(', ')}`)
    if (bad.length > 0) throw new InvalidArgumentError(`unknown scope(s): ${bad.join(', ')}; known: ${SCOPES.join(', ')}`)
    return list as Scope[]
  })
  .option('--days <n>', 'lifetime: 7, 30 or 90 days', (v: string) => {
    const n = Number(v)
    if (!(TOKEN_LIFETIMES_DAYS as readonly number[]).includes(n)) throw new InvalidArgumentError('must be 7, 30 or 90')
    return n
  }, 90)
  .action((opts: { org: string; name?: string; scopes?: Scope[]; days: number }) =>
    withStore(async (store, _cfg, where) => {
      const { ensureOrg, insertToken } = await service.tokens()
      const org = await ensureOrg(store.db, opts.org)
      const { record, secret } = await insertToken(store.db, { orgId: org.id, name: opts.name ?? null, scopes: opts.scopes ?? [...SCOPES], days: opts.days })
      process.stdout.write(JSON.stringify({ id: record.id, token: secret, org_id: org.id, scopes: record.scopes, expires_at: record.expiresAt }) + '\n')
      process.stderr.write(`warren: token ${record.id} written to ${where}\n`)
    }),
  )

tokens
  .command('revoke')
  .description('Revoke a token by id')
  .argument('<id>', 'token id (tok_…)')
  .action((id: string) =>
    withStore(async (store, _cfg, where) => {
      const { getTokenById, revokeToken } = await service.tokens()
      const t = await getTokenById(store.db, id)
      if (!t) {
        process.stderr.write(`warren: no token with id ${id} in ${where}\n`)
        process.exitCode = 1
        return
      }
      await revokeToken(store.db, id)
      process.stdout.write(JSON.stringify({ id, revoked: true }) + '\n')
      process.stderr.write(`warren: token ${id} revoked in ${where}\n`)
    }),
  )

program
  .command('keys')
  .description('The key that seals secrets at rest')
  .command('reseal')
  .description(
    'Seal every stored secret again under WARREN_ENCRYPTION_KEY (opening it with WARREN_ENCRYPTION_KEY_PREVIOUS where that sealed it); prints one JSON line. After it, the previous key can be dropped.',
  )
  .action(() =>
    withStore(async (store, cfg, where) => {
      const { resealSecrets, deploymentBox } = await service.keys()
      const report = await resealSecrets(store, deploymentBox(cfg))
      process.stdout.write(JSON.stringify(report) + '\n')
      process.stderr.write(`warren: secrets resealed in ${where}\n`)
      // Something sealed under neither key stays unreadable: the operator must know, and the exit says so.
      if (report.unreadable > 0) process.exitCode = 2
    }),
  )

clientCommands(program)

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`warren: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(1)
})
