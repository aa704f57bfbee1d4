import { test } from 'node:test'
import assert from 'node:assert/strict'
import { DEFAULT_SANDBOX_SUBNET, DEFAULT_WORKSPACE_MAX_WATCHES, localSettings, SANDBOX_UID_COUNT } from './local-settings.ts'

/** The message localSettings threw, or a failure when it did not throw. */
function refusal(env: Record<string, string>): string {
  try {
    localSettings(env)
  } catch (err) {
    return (err as Error).message
  }
  assert.fail(`localSettings accepted ${JSON.stringify(env)}`)
}

test('local settings: a node sandbox subnet and uid base default to the single-node pool and base', () => {
  const c = localSettings({})
  assert.equal(c.subnet, '10.213.0.0/16')
  assert.equal(DEFAULT_SANDBOX_SUBNET, '10.213.0.0/16')
  assert.equal(c.uidBase, 200_000)
  assert.equal(SANDBOX_UID_COUNT, 10_000)
})

test('local settings: WARREN_SANDBOX_SUBNET takes IPv4 networks from /8 to /24', () => {
  for (const subnet of ['10.214.0.0/16', '10.0.0.0/8', '192.168.7.0/24', '172.16.64.0/18']) {
    assert.equal(localSettings({ WARREN_SANDBOX_SUBNET: subnet }).subnet, subnet)
  }
})

test('local settings: a bad WARREN_SANDBOX_SUBNET is refused, saying why', () => {
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

test('local settings: WARREN_SANDBOX_UID_BASE is an integer of at least 1000 that leaves room for the whole range', () => {
  assert.equal(localSettings({ WARREN_SANDBOX_UID_BASE: '1000' }).uidBase, 1000)
  assert.equal(localSettings({ WARREN_SANDBOX_UID_BASE: '410000' }).uidBase, 410_000)
  for (const bad of ['999', '0', '-5', '200000.5', 'lots']) {
    assert.match(refusal({ WARREN_SANDBOX_UID_BASE: bad }), new RegExp(`WARREN_SANDBOX_UID_BASE must be an integer of at least 1000, got "${bad.replace('.', '\\.')}"`), bad)
  }
  assert.match(refusal({ WARREN_SANDBOX_UID_BASE: String(2 ** 32 - 5000) }), /WARREN_SANDBOX_UID_BASE leaves no room for 10000 uids/)
  assert.equal(localSettings({ WARREN_SANDBOX_UID_BASE: String(2 ** 32 - 1 - SANDBOX_UID_COUNT) }).uidBase, 2 ** 32 - 1 - SANDBOX_UID_COUNT)
})

test('local settings: WARREN_SANDBOX_ROOT_RANGES widens the uids a node takes, within the uid space', () => {
  assert.equal(localSettings({}).rootRanges, 0)
  assert.equal(localSettings({ WARREN_SANDBOX_ROOT_RANGES: '16' }).rootRanges, 16)
  assert.match(refusal({ WARREN_SANDBOX_ROOT_RANGES: '-1' }), /WARREN_SANDBOX_ROOT_RANGES must be an integer of at least 0/)
  const base = 2 ** 32 - 1 - SANDBOX_UID_COUNT - 65_536
  assert.equal(localSettings({ WARREN_SANDBOX_UID_BASE: String(base), WARREN_SANDBOX_ROOT_RANGES: '1' }).rootRanges, 1)
  assert.match(refusal({ WARREN_SANDBOX_UID_BASE: String(base), WARREN_SANDBOX_ROOT_RANGES: '2' }), /leaves no room for 141072 uids below 4294967295 \(2 WARREN_SANDBOX_ROOT_RANGES of 65536\)/)
})

test('local settings: one error lists every bad variable, the new ones among the others', () => {
  const message = refusal({ WARREN_SANDBOX_SUBNET: '10.1.2.3/16', WARREN_SANDBOX_UID_BASE: '12', WARREN_SANDBOX_PREFIX: 'NO' })
  assert.match(message, /^Invalid configuration:/)
  for (const name of ['WARREN_SANDBOX_SUBNET', 'WARREN_SANDBOX_UID_BASE', 'WARREN_SANDBOX_PREFIX']) assert.ok(message.includes(`- ${name}`), `${name} missing from:\n${message}`)
})

test('local settings: WARREN_WORKSPACE_MAX_WATCHES is a count of folders, 0 for never watching', () => {
  assert.equal(localSettings({}).maxWatches, DEFAULT_WORKSPACE_MAX_WATCHES)
  assert.equal(DEFAULT_WORKSPACE_MAX_WATCHES, 10_000)
  assert.equal(localSettings({ WARREN_WORKSPACE_MAX_WATCHES: '0' }).maxWatches, 0)
  assert.match(refusal({ WARREN_WORKSPACE_MAX_WATCHES: 'many' }), /WARREN_WORKSPACE_MAX_WATCHES must be an integer of at least 0, got "many"/)
})

test('local settings: WARREN_WORKSPACE_DISK_MB is each workspace’s quota in MiB, 0 for none, never below 16', () => {
  assert.equal(localSettings({}).diskMb, 10_240)
  assert.equal(localSettings({ WARREN_WORKSPACE_DISK_MB: '0' }).diskMb, 0)
  assert.equal(localSettings({ WARREN_WORKSPACE_DISK_MB: '512' }).diskMb, 512)
  assert.match(refusal({ WARREN_WORKSPACE_DISK_MB: '8' }), /WARREN_WORKSPACE_DISK_MB must be 0 \(no quota\) or at least 16, got "8"/)
})

test('local settings: the prefix and the private CIDRs the egress proxy lets through', () => {
  assert.equal(localSettings({}).prefix, 'wr')
  assert.equal(localSettings({ WARREN_SANDBOX_PREFIX: 'n2' }).prefix, 'n2')
  assert.match(refusal({ WARREN_SANDBOX_PREFIX: 'toolong7' }), /WARREN_SANDBOX_PREFIX must be 1 to 6 lowercase letters and digits, starting with a letter/)
  assert.deepEqual(localSettings({ WARREN_SANDBOX_ALLOW_PRIVATE: '10.1.0.0/16, 192.168.0.0/24' }).allowPrivate, ['10.1.0.0/16', '192.168.0.0/24'])
  assert.match(refusal({ WARREN_SANDBOX_ALLOW_PRIVATE: '10.1.0.0' }), /WARREN_SANDBOX_ALLOW_PRIVATE must be a comma list of CIDRs \(10\.1\.0\.0\/16\), got "10\.1\.0\.0"/)
})
