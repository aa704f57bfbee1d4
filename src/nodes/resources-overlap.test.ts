import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { HostClaim } from '../sandbox/sandbox.ts'
import { resourcesOverlap } from './resources-overlap.ts'

const node = (over: Partial<HostClaim> = {}): HostClaim => ({ prefix: 'wr', subnet: '10.213.0.0/16', uidBase: 200_000, uidCount: 10_000, ...over })
const apart = node({ prefix: 'n2', subnet: '10.214.0.0/16', uidBase: 210_000 })

test('resourcesOverlap: nodes apart in prefix, subnet and uids have no conflict, either way round', () => {
  assert.deepEqual(resourcesOverlap(node(), apart), [])
  assert.deepEqual(resourcesOverlap(apart, node()), [])
  // Adjacent is not overlapping: the uid range ends one before the other's base, the /16s touch.
  assert.deepEqual(resourcesOverlap(node({ uidBase: 200_000 }), node({ prefix: 'b', subnet: '10.212.0.0/16', uidBase: 190_000 })), [])
})

test('resourcesOverlap: a shared prefix is a conflict on its own', () => {
  assert.deepEqual(resourcesOverlap(node(), { ...apart, prefix: 'wr' }), ['both use the sandbox prefix "wr"'])
  // Prefixes that only start alike name different resources (cgroups `warren-<prefix>-`).
  assert.deepEqual(resourcesOverlap(node({ prefix: 'ab' }), { ...apart, prefix: 'abc' }), [])
})

test('resourcesOverlap: subnets overlap when one holds the other, whatever their order and width', () => {
  const cases: [string, string, boolean][] = [
    ['10.213.0.0/16', '10.213.0.0/16', true],
    ['10.213.0.0/16', '10.213.128.0/24', true],
    ['10.213.128.0/24', '10.213.0.0/16', true],
    ['10.0.0.0/8', '10.250.4.0/24', true],
    ['10.213.0.0/16', '10.214.0.0/16', false],
    ['10.213.0.0/24', '10.213.1.0/24', false],
    ['10.212.0.0/15', '10.213.0.0/16', true],
    ['10.214.0.0/15', '10.213.0.0/16', false],
    ['172.16.0.0/12', '10.0.0.0/8', false],
  ]
  for (const [a, b, overlap] of cases) {
    const got = resourcesOverlap(node({ subnet: a }), { ...apart, subnet: b })
    assert.deepEqual(got, overlap ? [`sandbox subnets ${a} and ${b} overlap`] : [], `${a} vs ${b}`)
  }
})

test('resourcesOverlap: uid ranges overlap when they share one uid, the last of one included', () => {
  const cases: [number, number, boolean][] = [
    [200_000, 209_999, true], // b starts on a's last uid
    [200_000, 210_000, false], // b starts right after it
    [200_000, 195_000, true],
    [200_000, 190_001, true], // b's last uid is a's first
    [200_000, 190_000, false],
    [200_000, 200_000, true],
  ]
  for (const [a, b, overlap] of cases) {
    const got = resourcesOverlap(node({ uidBase: a }), { ...apart, uidBase: b })
    assert.deepEqual(got, overlap ? [`sandbox uid ranges ${a}–${a + 9_999} and ${b}–${b + 9_999} overlap`] : [], `${a} vs ${b}`)
  }
})

test('resourcesOverlap: every conflict is listed, in a fixed order', () => {
  assert.deepEqual(resourcesOverlap(node(), node()), [
    'both use the sandbox prefix "wr"',
    'sandbox subnets 10.213.0.0/16 and 10.213.0.0/16 overlap',
    'sandbox uid ranges 200000–209999 and 200000–209999 overlap',
  ])
})

test('resourcesOverlap: a subnet that is not an IPv4 CIDR is a programming error, not a conflict', () => {
  assert.throws(() => resourcesOverlap(node({ subnet: 'fd00::/64' }), apart), TypeError)
  assert.throws(() => resourcesOverlap(node(), { ...apart, subnet: '10.213.0.0' }), TypeError)
})

test('resourcesOverlap: a claim with no subnet and no uids (a provider whose sandboxes run elsewhere) meets others only by its prefix', () => {
  const remote = node({ prefix: 'k8', subnet: null, uidBase: 0, uidCount: 0 })
  assert.deepEqual(resourcesOverlap(remote, node()), [])
  assert.deepEqual(resourcesOverlap(node(), remote), [])
  assert.deepEqual(resourcesOverlap(remote, { ...remote }), ['both use the sandbox prefix "k8"'])
  // One side without a subnet still has its uids compared.
  assert.deepEqual(resourcesOverlap(node({ subnet: null }), { ...apart, uidBase: 200_000 }), ['sandbox uid ranges 200000–209999 and 200000–209999 overlap'])
})
