import { test } from 'node:test'
import assert from 'node:assert/strict'
import { loadConfig } from './config.ts'

/** The message loadConfig threw, or a failure when it did not throw. */
function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env)
  } catch (err) {
    return (err as Error).message
  }
  assert.fail(`loadConfig accepted ${JSON.stringify(env)}`)
}




test('config: artifact ceilings are MiB; a turn may be lowered below the specification’s 500 MiB, never raised', () => {
  const c = loadConfig({})
  assert.deepEqual([c.artifactTurnBytes, c.artifactOrgBytes], [500 * 1024 * 1024, 10_240 * 1024 * 1024])
  const set = loadConfig({ WARREN_ARTIFACT_TURN_MB: '64', WARREN_ARTIFACT_ORG_MB: '2048' })
  assert.deepEqual([set.artifactTurnBytes, set.artifactOrgBytes], [64 * 1024 * 1024, 2048 * 1024 * 1024])
  assert.match(refusal({ WARREN_ARTIFACT_TURN_MB: '501' }), /WARREN_ARTIFACT_TURN_MB may lower the specification's 500 MiB ceiling, not raise it, got "501"/)
  assert.match(refusal({ WARREN_ARTIFACT_ORG_MB: '0' }), /WARREN_ARTIFACT_ORG_MB must be an integer of at least 1, got "0"/)
})


test('config: the outbound "allow private" settings are CIDR lists; the old switch reads as loopback and the private ranges', () => {
  const names = ['WARREN_ALLOW_PRIVATE_WEBHOOKS', 'WARREN_ALLOW_PRIVATE_MCP', 'WARREN_MODEL_ALLOW_PRIVATE'] as const
  const read = (value: string) => {
    const c = loadConfig(Object.fromEntries(names.map((n) => [n, value])))
    return [c.allowPrivateWebhooks, c.allowPrivateMcp, c.modelAllowPrivate]
  }
  for (const off of ['', '0', 'false', 'off']) for (const got of read(off)) assert.deepEqual(got, [], off)
  for (const got of read('127.0.0.1/32, 10.0.5.0/24')) assert.deepEqual(got, ['127.0.0.1/32', '10.0.5.0/24'])
  for (const got of read('1')) {
    assert.ok(got.includes('127.0.0.0/8') && got.includes('10.0.0.0/8'), String(got))
    assert.ok(!got.some((c) => c.startsWith('169.254.') || c.startsWith('0.0.0.0')), 'never link-local nor everything')
  }
  const message = refusal({ WARREN_MODEL_ALLOW_PRIVATE: '10.0.5.0/24,gpu-box', WARREN_ALLOW_PRIVATE_MCP: '10.0.0.0/40' })
  assert.match(message, /WARREN_MODEL_ALLOW_PRIVATE must be a comma list of CIDRs .*"gpu-box"/)
  assert.match(message, /WARREN_ALLOW_PRIVATE_MCP must be a comma list of CIDRs .*"10\.0\.0\.0\/40"/)
})

test('config: the shared configuration keeps the provider kind and the WARREN_ variables for its settings, which it does not check itself', () => {
  const c = loadConfig({ WARREN_SANDBOX_PROVIDER: 'local', WARREN_SANDBOX_SUBNET: 'pool', HOME: '/root' })
  assert.equal(c.sandboxProvider, 'local')
  // A bad local setting is the local provider's to refuse, at start (src/sandbox/local/local-settings.ts).
  assert.deepEqual(c.providerEnv, { WARREN_SANDBOX_PROVIDER: 'local', WARREN_SANDBOX_SUBNET: 'pool' })
})

test('config: image registries: WARREN_IMAGE_ALLOW_PRIVATE is a CIDR list, WARREN_IMAGE_PLAIN_HTTP a list of host[:port], WARREN_IMAGE_MAX_LAYER_MB a ceiling, WARREN_IMAGE_KEEP_HOURS a week unless told', () => {
  const d = loadConfig({})
  assert.deepEqual([d.imageAllowPrivate, d.imagePlainHttp, d.imageMaxLayerMb, d.imageKeepHours], [[], [], 4096, 168])
  assert.equal(loadConfig({ WARREN_IMAGE_KEEP_HOURS: '0' }).imageKeepHours, 0, '0: kept for ever')
  const c = loadConfig({ WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32,10.1.0.0/16', WARREN_IMAGE_PLAIN_HTTP: 'Registry.lan:5000, 10.1.2.3', WARREN_IMAGE_MAX_LAYER_MB: '512' })
  assert.deepEqual(c.imageAllowPrivate, ['127.0.0.1/32', '10.1.0.0/16'])
  assert.deepEqual(c.imagePlainHttp, ['registry.lan:5000', '10.1.2.3'])
  assert.equal(c.imageMaxLayerMb, 512)
  const message = refusal({ WARREN_IMAGE_ALLOW_PRIVATE: 'registry.lan', WARREN_IMAGE_PLAIN_HTTP: 'http://registry.lan:5000', WARREN_IMAGE_MAX_LAYER_MB: '0', WARREN_IMAGE_KEEP_HOURS: '-1' })
  assert.match(message, /WARREN_IMAGE_ALLOW_PRIVATE must be a comma list of CIDRs .*"registry\.lan"/)
  assert.match(message, /WARREN_IMAGE_PLAIN_HTTP must be a comma list of registries as references name them \(host\[:port\]\), got "http:\/\/registry\.lan:5000"/)
  assert.match(message, /WARREN_IMAGE_MAX_LAYER_MB must be an integer of at least 1/)
  assert.match(message, /WARREN_IMAGE_KEEP_HOURS must be an integer of at least 0, got "-1"/)
})
