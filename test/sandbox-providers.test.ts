// The sandbox provider is chosen by kind through one registry (WARREN_SANDBOX_PROVIDER), and what it
// claims on the host is what its node records and is judged by: nothing of the node's identity is
// read from the local provider's own settings.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { assemble } from '../src/assemble.ts'
import { loadConfig } from '../src/config.ts'
import { configureProvider, PROVIDER_KINDS, type ProviderKind } from '../src/sandbox/providers.ts'
import { localKind } from '../src/sandbox/local/local-kind.ts'
import type { HostClaim, SandboxProvider } from '../src/sandbox/sandbox.ts'
import { secretBox } from '../src/shared/secret-box.ts'
import { randomText } from '../src/shared/ids.ts'
import { onPostgres, startWarren, type Warren } from './harness.ts'
import { removeSharedStore } from './restart-store.ts'

const nodeRow = async (w: Warren) => w.store.db.selectFrom('nodes').selectAll().where('id', '=', w.node.id).executeTakeFirstOrThrow()

test('an unknown provider kind is refused by name, listing the kinds there are', () => {
  const ctx = { config: loadConfig({}), log: { info() {}, warn() {}, error() {} } }
  assert.throws(() => configureProvider('kubernetes', ctx), (e: Error) => e.message === 'Invalid configuration:\n  - WARREN_SANDBOX_PROVIDER must be one of "local", got "kubernetes"')
  // A name inherited by every object is no kind either.
  assert.throws(() => configureProvider('toString', ctx), /WARREN_SANDBOX_PROVIDER must be one of "local", got "toString"/)
  assert.equal(loadConfig({}).sandboxProvider, 'local', 'local unless told otherwise')
  assert.deepEqual(Object.keys(PROVIDER_KINDS), ['local'])
})

test('the service refuses to start on an unknown kind before it opens its store', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-kind-'))
  try {
    const config = loadConfig({ WARREN_DATA_DIR: dataDir, PORT: '0', WARREN_SANDBOX_PROVIDER: 'pods' })
    await assert.rejects(assemble(config, { box: secretBox(Buffer.alloc(32, 7)), logger: false }), /WARREN_SANDBOX_PROVIDER must be one of "local", got "pods"/)
    assert.deepEqual(fs.readdirSync(dataDir), [], 'nothing was made: no store, no workspaces folder')
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
})

test('a bad setting of the local provider stops the start with its reason, before the store opens', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-kind-'))
  try {
    // The shared configuration takes it: the setting is the local provider's to read.
    const config = loadConfig({ WARREN_DATA_DIR: dataDir, PORT: '0', WARREN_SANDBOX_SUBNET: '10.213.4.0/16', WARREN_WORKSPACE_DISK_MB: '8' })
    await assert.rejects(assemble(config, { box: secretBox(Buffer.alloc(32, 7)), logger: false }), (e: Error) => {
      assert.match(e.message, /^Invalid configuration:\n  - WARREN_SANDBOX_SUBNET is not a network address \(did you mean 10\.213\.0\.0\/16\?\), got "10\.213\.4\.0\/16"\n  - WARREN_WORKSPACE_DISK_MB must be 0 \(no quota\) or at least 16, got "8"$/)
      return true
    })
    assert.deepEqual(fs.readdirSync(dataDir), [], 'nothing was made')
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
})

test('the configured kind comes from the registry the caller gives, and the node records what that provider claims', async () => {
  // A provider whose sandboxes would run elsewhere: it claims a prefix of its own, no subnet, no uids.
  const claim: HostClaim = { prefix: `k${randomText(4)}`, subnet: null, uidBase: 0, uidCount: 0 }
  const configured: string[] = []
  let made: SandboxProvider | null = null
  const elsewhere: ProviderKind = {
    configure(ctx) {
      configured.push(ctx.config.sandboxProvider)
      const start = localKind({ prefix: `e${randomText(4)}`, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 }).configure(ctx)
      return async () => {
        const inner = await start()
        // The local provider underneath does the work; only its claim is this kind's.
        made = new Proxy(inner, { get: (target, key) => (key === 'claim' ? claim : Reflect.get(target, key)) })
        return made
      }
    },
  }
  const w = await startWarren('sqlite', { env: { WARREN_SANDBOX_PROVIDER: 'elsewhere' }, providers: { elsewhere } })
  try {
    assert.deepEqual(configured, ['elsewhere'], 'the kind was configured once, with the configuration that named it')
    assert.equal(w.provider, made, 'the service runs on the provider the kind made')
    const row = await nodeRow(w)
    assert.deepEqual(
      { prefix: row.sandbox_prefix, subnet: row.sandbox_subnet, uidBase: row.uid_base, uidCount: row.uid_count },
      { prefix: claim.prefix, subnet: '', uidBase: 0, uidCount: 0 },
    )
  } finally {
    await w.close()
  }
})

test('the local provider claims its prefix, subnet and uid range, and its node records exactly that', async () => {
  const prefix = `l${randomText(4)}`
  const w = await startWarren('sqlite', { sandboxPrefix: prefix })
  try {
    const { claim } = w.provider
    assert.equal(w.provider.name, 'local')
    assert.equal(claim.prefix, prefix)
    assert.equal(claim.subnet, w.config.providerEnv.WARREN_SANDBOX_SUBNET, "the subnet the harness configured, the network's pool")
    assert.equal(claim.uidCount, 1000, "the harness's local kind takes 1000 uids")
    assert.ok(claim.uidBase >= 300_000 && claim.uidBase % 1000 === 0, String(claim.uidBase))
    const row = await nodeRow(w)
    assert.deepEqual({ prefix: row.sandbox_prefix, subnet: row.sandbox_subnet, uidBase: row.uid_base, uidCount: row.uid_count }, claim)
  } finally {
    await w.close()
  }
})

onPostgres('claims of nodes on one host', () => {
  test('a node whose provider claims uids a live node on this host holds is refused, naming them', async () => {
    const pgSchema = `t_${randomText(12)}`
    const first = await startWarren('postgres', { pgSchema })
    try {
      const held = first.provider.claim
      // Its own prefix and no subnet: only the uids it claims meet the live node's.
      const claim: HostClaim = { prefix: `o${randomText(4)}`, subnet: null, uidBase: held.uidBase + 500, uidCount: 1000 }
      const overlapping: ProviderKind = {
        configure: (ctx) => {
          const start = localKind({ prefix: claim.prefix, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 }).configure(ctx)
          return async () => {
            const inner = await start()
            return new Proxy(inner, { get: (target, key) => (key === 'claim' ? claim : Reflect.get(target, key)) })
          }
        },
      }
      const last = held.uidBase + held.uidCount - 1
      await assert.rejects(
        startWarren('postgres', { pgSchema, env: { WARREN_SANDBOX_PROVIDER: 'overlapping' }, providers: { overlapping } }),
        new RegExp(`would share its host with the live node ${first.node.id} .*sandbox uid ranges ${held.uidBase}–${last} and ${claim.uidBase}–${claim.uidBase + 999} overlap`),
      )
    } finally {
      await first.close()
      await removeSharedStore('postgres', fs.mkdtempSync(path.join(os.tmpdir(), 'warren-claims-')), pgSchema)
    }
  })
})
