import { test } from 'node:test'
import assert from 'node:assert/strict'
import { DEFAULT_SANDBOX_SUBNET, DEFAULT_WORKSPACE_MAX_WATCHES, loadConfig, SANDBOX_UID_COUNT } from './config.ts'

/** The message loadConfig threw, or a failure when it did not throw. */
function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env)
  } catch (err) {
    return (err as Error).message
  }
  assert.fail(`loadConfig accepted ${JSON.stringify(env)}`)
}

test('config: a node sandbox subnet and uid base default to the single-node pool and base', () => {
  const c = loadConfig({})
  assert.equal(c.sandboxSubnet, '10.213.0.0/16')
  assert.equal(DEFAULT_SANDBOX_SUBNET, '10.213.0.0/16')
  assert.equal(c.sandboxUidBase, 200_000)
  assert.equal(SANDBOX_UID_COUNT, 10_000)
})

test('config: WARREN_SANDBOX_SUBNET takes IPv4 networks from /8 to /24', () => {
  for (const subnet of ['10.214.0.0/16', '10.0.0.0/8', '192.168.7.0/24', '172.16.64.0/18']) {
    assert.equal(loadConfig({ WARREN_SANDBOX_SUBNET: subnet }).sandboxSubnet, subnet)
  }
})

test('config: a bad WARREN_SANDBOX_SUBNET is refused, saying why', () => {
  const cases: [string, RegExp][] = [
    ['10.213.0.0', /WARREN_SANDBOX_SUBNET is not an IPv4 CIDR \(a\.b\.c\.d\/n\), got "10\.213\.0\.0"/],
    ['fd00::/64', /WARREN_SANDBOX_SUBNET is not an IPv4 CIDR/],
    ['10.213.0.256/24', /WARREN_SANDBOX_SUBNET is not an IPv4 CIDR/],
    ['10.213.0.0/33', /WARREN_SANDBOX_SUBNET is not an IPv4 CIDR/],
    ['10.0.0.0/7', /WARREN_SANDBOX_SUBNET must be \/8 to \/24, got "10\.0\.0\.0\/7"/],
    ['10.213.5.0/25', /WARREN_SANDBOX_SUBNET must be \/8 to \/24/],
    ['10.213.4.0/16', /WARREN_SANDBOX_SUBNET is not a network address \(did you mean 10\.213\.0\.0\/16\?\), got "10\.213\.4\.0\/16"/],
    ['pool', /WARREN_SANDBOX_SUBNET is not an IPv4 CIDR/],
  ]
  for (const [subnet, expected] of cases) assert.match(refusal({ WARREN_SANDBOX_SUBNET: subnet }), expected, subnet)
})

test('config: WARREN_SANDBOX_UID_BASE is an integer of at least 1000 that leaves room for the whole range', () => {
  assert.equal(loadConfig({ WARREN_SANDBOX_UID_BASE: '1000' }).sandboxUidBase, 1000)
  assert.equal(loadConfig({ WARREN_SANDBOX_UID_BASE: '410000' }).sandboxUidBase, 410_000)
  for (const bad of ['999', '0', '-5', '200000.5', 'lots']) {
    assert.match(refusal({ WARREN_SANDBOX_UID_BASE: bad }), new RegExp(`WARREN_SANDBOX_UID_BASE must be an integer of at least 1000, got "${bad.replace('.', '\\.')}"`), bad)
  }
  assert.match(refusal({ WARREN_SANDBOX_UID_BASE: String(2 ** 32 - 5000) }), /WARREN_SANDBOX_UID_BASE leaves no room for 10000 uids/)
  assert.equal(loadConfig({ WARREN_SANDBOX_UID_BASE: String(2 ** 32 - 1 - SANDBOX_UID_COUNT) }).sandboxUidBase, 2 ** 32 - 1 - SANDBOX_UID_COUNT)
})

test('config: one error lists every bad variable, the new ones among the others', () => {
  const message = refusal({ WARREN_SANDBOX_SUBNET: '10.1.2.3/16', WARREN_SANDBOX_UID_BASE: '12', WARREN_SANDBOX_PREFIX: 'NO' })
  assert.match(message, /^Invalid configuration:/)
  for (const name of ['WARREN_SANDBOX_SUBNET', 'WARREN_SANDBOX_UID_BASE', 'WARREN_SANDBOX_PREFIX']) assert.ok(message.includes(`- ${name}`), `${name} missing from:\n${message}`)
})

test('config: artifact ceilings are MiB; a turn may be lowered below the specification’s 500 MiB, never raised', () => {
  const c = loadConfig({})
  assert.deepEqual([c.artifactTurnBytes, c.artifactOrgBytes], [500 * 1024 * 1024, 10_240 * 1024 * 1024])
  const set = loadConfig({ WARREN_ARTIFACT_TURN_MB: '64', WARREN_ARTIFACT_ORG_MB: '2048' })
  assert.deepEqual([set.artifactTurnBytes, set.artifactOrgBytes], [64 * 1024 * 1024, 2048 * 1024 * 1024])
  assert.match(refusal({ WARREN_ARTIFACT_TURN_MB: '501' }), /WARREN_ARTIFACT_TURN_MB may lower the specification's 500 MiB ceiling, not raise it, got "501"/)
  assert.match(refusal({ WARREN_ARTIFACT_ORG_MB: '0' }), /WARREN_ARTIFACT_ORG_MB must be an integer of at least 1, got "0"/)
})

test('config: WARREN_WORKSPACE_MAX_WATCHES is a count of folders, 0 for never watching', () => {
  assert.equal(loadConfig({}).workspaceMaxWatches, DEFAULT_WORKSPACE_MAX_WATCHES)
  assert.equal(DEFAULT_WORKSPACE_MAX_WATCHES, 10_000)
  assert.equal(loadConfig({ WARREN_WORKSPACE_MAX_WATCHES: '0' }).workspaceMaxWatches, 0)
  assert.match(refusal({ WARREN_WORKSPACE_MAX_WATCHES: 'many' }), /WARREN_WORKSPACE_MAX_WATCHES must be an integer of at least 0, got "many"/)
})

test('config: WARREN_WORKSPACE_DISK_MB is each workspace’s quota in MiB, 0 for none, never below 16', () => {
  assert.equal(loadConfig({}).workspaceDiskMb, 10_240)
  assert.equal(loadConfig({ WARREN_WORKSPACE_DISK_MB: '0' }).workspaceDiskMb, 0)
  assert.equal(loadConfig({ WARREN_WORKSPACE_DISK_MB: '512' }).workspaceDiskMb, 512)
  assert.match(refusal({ WARREN_WORKSPACE_DISK_MB: '8' }), /WARREN_WORKSPACE_DISK_MB must be 0 \(no quota\) or at least 16, got "8"/)
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

test('config: image registries: WARREN_IMAGE_ALLOW_PRIVATE is a CIDR list, WARREN_IMAGE_PLAIN_HTTP a list of host[:port], WARREN_IMAGE_MAX_LAYER_MB a ceiling', () => {
  const d = loadConfig({})
  assert.deepEqual([d.imageAllowPrivate, d.imagePlainHttp, d.imageMaxLayerMb], [[], [], 4096])
  const c = loadConfig({ WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32,10.1.0.0/16', WARREN_IMAGE_PLAIN_HTTP: 'Registry.lan:5000, 10.1.2.3', WARREN_IMAGE_MAX_LAYER_MB: '512' })
  assert.deepEqual(c.imageAllowPrivate, ['127.0.0.1/32', '10.1.0.0/16'])
  assert.deepEqual(c.imagePlainHttp, ['registry.lan:5000', '10.1.2.3'])
  assert.equal(c.imageMaxLayerMb, 512)
  const message = refusal({ WARREN_IMAGE_ALLOW_PRIVATE: 'registry.lan', WARREN_IMAGE_PLAIN_HTTP: 'http://registry.lan:5000', WARREN_IMAGE_MAX_LAYER_MB: '0' })
  assert.match(message, /WARREN_IMAGE_ALLOW_PRIVATE must be a comma list of CIDRs .*"registry\.lan"/)
  assert.match(message, /WARREN_IMAGE_PLAIN_HTTP must be a comma list of registries as references name them \(host\[:port\]\), got "http:\/\/registry\.lan:5000"/)
  assert.match(message, /WARREN_IMAGE_MAX_LAYER_MB must be an integer of at least 1/)
})
