// The one table of address vectors, and every place that opens connections for someone else
// checked against it: the egress proxy, webhook subscriptions and deliveries, remote MCP servers.
// They disagreed before this table existed (the proxy let ::127.0.0.1 and 2002:7f00:1::1
// through; webhooks let 100::1 and the host's own addresses through).
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { isIP } from 'node:net'
import { networkInterfaces } from 'node:os'
import type { LookupAddress } from 'node:dns'
import { addressRefusal, classifyAddress, embeddedIpv4, inCidr, LOOPBACK_AND_PRIVATE } from './address-policy.ts'
import { checkWebhookUrl } from '../webhooks/webhook-url.ts'
import { guardedLookup, refusedHost } from './guarded-lookup.ts'
import { WEBHOOK_REFUSED } from '../webhooks/send-delivery.ts'
import { guardedFetch, MCP_REFUSED } from '../mcp/guarded-fetch.ts'

type Vector = [address: string, kind: string | null, reach?: 'never' | 'private']

const LOOP = 'a loopback address'
const PRIV = 'a private address'
const LINK = 'a link-local address'

const VECTORS: Vector[] = [
  // IPv4
  ['0.0.0.0', 'an unspecified address', 'never'],
  ['127.0.0.1', LOOP, 'never'],
  ['127.255.255.254', LOOP, 'never'],
  ['169.254.169.254', LINK, 'never'],
  ['224.0.0.251', 'a multicast address', 'never'],
  ['239.255.255.250', 'a multicast address', 'never'],
  ['240.0.0.1', 'a reserved address', 'never'],
  ['255.255.255.255', 'a reserved address', 'never'],
  ['10.0.0.7', PRIV, 'private'],
  ['172.16.0.9', PRIV, 'private'],
  ['172.31.255.255', PRIV, 'private'],
  ['192.168.1.1', PRIV, 'private'],
  ['100.64.0.1', 'a shared (carrier-grade NAT) address', 'private'],
  ['192.0.0.8', 'a protocol-assignment address', 'private'],
  ['198.18.0.1', 'a benchmarking address', 'private'],
  ['198.51.100.7', 'a documentation address', 'private'],
  ['203.0.113.7', 'a documentation address', 'private'],
  ['172.32.0.1', null],
  ['100.128.0.1', null],
  ['198.20.0.1', null],
  ['8.8.8.8', null],
  ['93.184.216.34', null],
  // IPv6
  ['::', 'an unspecified address', 'never'],
  ['::1', LOOP, 'never'],
  ['0:0:0:0:0:0:0:1', LOOP, 'never'],
  ['fe80::1', LINK, 'never'],
  ['fe80::1%eth0', LINK, 'never'],
  ['ff02::1', 'a multicast address', 'never'],
  ['100::1', 'a discard-only address', 'never'],
  ['100::ffff:ffff:ffff:ffff', 'a discard-only address', 'never'],
  ['fd00::5', 'a private (unique local) address', 'private'],
  ['fc00::1', 'a private (unique local) address', 'private'],
  ['fec0::1', 'a private (site-local) address', 'private'],
  ['64:ff9b:1::a00:1', 'a local-use NAT64 address', 'private'],
  ['2001:2::1', 'a benchmarking address', 'private'],
  ['2001:db8::1', 'a documentation address', 'private'],
  ['2606:2800:220:1::1', null],
  ['2001:4860:4860::8888', null],
  // IPv6 carrying IPv4: judged by the IPv4 address it delivers to.
  ['::ffff:127.0.0.1', LOOP, 'never'], // mapped
  ['::ffff:7f00:1', LOOP, 'never'],
  ['::FFFF:A9FE:A9FE', LINK, 'never'],
  ['::ffff:192.168.1.2', PRIV, 'private'],
  ['::ffff:8.8.8.8', null],
  ['::ffff:0:127.0.0.1', LOOP, 'never'], // translated
  ['::ffff:0:808:808', null],
  ['::127.0.0.1', LOOP, 'never'], // compatible
  ['::10.0.0.1', PRIV, 'private'],
  ['::8.8.8.8', null],
  ['64:ff9b::7f00:1', LOOP, 'never'], // NAT64
  ['64:ff9b::169.254.169.254', LINK, 'never'],
  ['64:ff9b::a00:1', PRIV, 'private'],
  ['64:ff9b::808:808', null],
  ['2002:7f00:1::1', LOOP, 'never'], // 6to4
  ['2002:a9fe:a9fe::1', LINK, 'never'],
  ['2002:c0a8:101::1', PRIV, 'private'],
  ['2002:808:808::1', null],
  ['2001:0:4136:e378:8000:63bf:80ff:fffe', LOOP, 'never'], // Teredo, client 127.0.0.1 inverted
  ['2001:0:4136:e378:8000:63bf:f5ff:fffe', PRIV, 'private'], // client 10.0.0.1
  ['2001:0:4136:e378:8000:63bf:f7f7:f7f7', null], // client 8.8.8.8
]

const OWN = "the host's own address"
const canonical = (a: string) => (isIP(a) === 6 ? new URL(`http://[${a.replace(/%.*$/, '')}]/`).hostname.slice(1, -1) : a)
const own = new Set(Object.values(networkInterfaces()).flatMap((l) => l ?? []).map((a) => canonical(a.address)))
/** Host addresses outside the never ranges: the ones only the host rule refuses. */
const ownAddresses = [...own].filter((a) => classifyAddress(a)?.kind === OWN)

/**
 * What the policy says about a vector on this machine. A machine may hold a vector's address on
 * one of its interfaces (this suite's machine has 192.0.2.2): then it is the host's own, unless a
 * never range already refuses it.
 */
function expected([address, kind, reach]: Vector): { kind: string; reach: 'never' | 'private' } | null {
  if (reach === 'never') return { kind: kind!, reach }
  const v4 = embeddedIpv4(address)
  if (own.has(canonical(address)) || (v4 !== null && own.has(v4))) return { kind: OWN, reach: 'never' }
  return kind === null ? null : { kind, reach: reach! }
}

const urlHost = (a: string) => (a.includes(':') ? `[${a}]` : a)
const withZone = (a: string) => a.includes('%')

describe('address policy: one table of vectors', () => {
  it('classifies every vector: what it is and whether a deployment may open it', () => {
    for (const v of VECTORS) assert.deepEqual(classifyAddress(v[0]), expected(v), v[0])
  })

  it("refuses the host's own addresses, also when spelled as IPv6 carrying them", (t) => {
    if (ownAddresses.length === 0) return t.skip('this machine has no address outside the loopback and link-local ranges')
    for (const a of ownAddresses) {
      assert.deepEqual(classifyAddress(a), { kind: OWN, reach: 'never' }, a)
      if (isIP(a) === 4) assert.deepEqual(classifyAddress(`::ffff:${a}`), { kind: OWN, reach: 'never' }, a)
      assert.equal(addressRefusal(a, [...LOOPBACK_AND_PRIVATE, '0.0.0.0/0', '::/0']), OWN, 'unless a CIDR names it exactly')
      assert.equal(addressRefusal(a, [isIP(a) === 4 ? `${a}/32` : `${a}/128`]), null, 'named exactly')
    }
  })

  it('judges an address again under another policy, and again after the first answer (verdicts are remembered per address and policy)', () => {
    for (let i = 0; i < 2; i++) {
      assert.equal(addressRefusal('10.1.2.3', []), 'a private address')
      assert.equal(addressRefusal('10.1.2.3', ['10.0.0.0/8']), null)
      assert.equal(addressRefusal('10.1.2.3', ['10.0.0.0/8', '192.168.0.0/16']), null)
      assert.equal(addressRefusal('10.1.2.3', ['192.168.0.0/16']), 'a private address')
      assert.equal(addressRefusal('10.1.2.4', ['10.1.2.3/32']), 'a private address')
      assert.equal(addressRefusal('10.1.2.3', ['10.1.2.3/32']), null)
    }
  })

  it('refuses what is not an IP address', () => {
    for (const s of ['example.com', '127.1', '2130706433', '', '::ffff:999.1.1.1']) {
      assert.deepEqual(classifyAddress(s), { kind: 'not an IP address', reach: 'never' }, s)
    }
  })

  it('egress proxy: refuses every non-public vector; private ranges only unless the deployment allows them', () => {
    const everyPrivateRange = ['0.0.0.0/0', '::/0']
    for (const v of VECTORS) {
      const want = expected(v)
      assert.equal(addressRefusal(v[0]), want?.kind ?? null, v[0])
      assert.equal(addressRefusal(v[0], everyPrivateRange), want?.reach === 'never' ? want.kind : null, `${v[0]} with every private range allowed`)
    }
    // A CIDR allows only the private addresses in it, IPv4 carried in IPv6 included.
    assert.equal(addressRefusal('10.0.0.7', ['10.0.0.0/24']), null)
    assert.equal(addressRefusal('::ffff:10.0.0.7', ['10.0.0.0/24']), null)
    assert.equal(addressRefusal('2002:a00:7::1', ['10.0.0.0/24']), null)
    assert.equal(addressRefusal('10.0.1.7', ['10.0.0.0/24']), PRIV)
    // An IPv6 CIDR opens no IPv4 address carried in IPv6: a deployment that lists ::/0 for its own
    // IPv6 servers has not opened 10.0.0.0/8 through a NAT64 or 6to4 gateway.
    for (const carried of ['64:ff9b::a00:1', '2002:a00:1::1', '::ffff:10.0.0.1']) {
      assert.equal(addressRefusal(carried, ['::/0']), PRIV, `${carried} under ::/0`)
      assert.equal(addressRefusal(carried, ['10.0.0.0/8']), null, `${carried} under 10.0.0.0/8`)
    }
    assert.equal(addressRefusal('fd00::5', ['::/0']), null, 'control: ::/0 opens the IPv6 private ranges')
    assert.equal(addressRefusal('::1', ['::1/128']), null, 'control: ::1 is judged as itself, not as the IPv4 0.0.0.1')
    // A never range opens only to a CIDR inside it; the metadata addresses only to one naming them.
    assert.equal(addressRefusal('127.0.0.1', ['127.0.0.1/32']), null)
    assert.equal(addressRefusal('::ffff:127.0.0.1', ['127.0.0.0/8']), null)
    assert.equal(addressRefusal('127.0.0.2', ['127.0.0.1/32']), LOOP)
    assert.equal(addressRefusal('127.0.0.1', ['0.0.0.0/0']), LOOP, 'a wide CIDR does not open loopback')
    assert.equal(addressRefusal('127.0.0.1', ['10.0.0.0/8']), LOOP)
    for (const meta of ['169.254.169.254', '::ffff:169.254.169.254', 'fd00:ec2::254', '100.100.100.200']) {
      for (const allowed of [LOOPBACK_AND_PRIVATE, ['169.254.0.0/16'], ['fd00:ec2::/64'], ['100.64.0.0/10'], ['0.0.0.0/0', '::/0']]) {
        assert.notEqual(addressRefusal(meta, allowed), null, `${meta} under ${allowed}`)
      }
    }
    assert.equal(addressRefusal('169.254.169.254', ['169.254.169.254/32']), null)
    assert.equal(addressRefusal('fd00:ec2::254', ['fd00:ec2::254/128']), null)
    assert.equal(addressRefusal('fd00:ec2::5', ['fd00:ec2::/64']), null, 'its neighbours are private addresses like any other')
    assert.equal(inCidr('64:ff9b::a00:1', '10.0.0.0/8'), true)
    assert.equal(inCidr('fd00::5', 'fd00::/8'), true)
    assert.equal(inCidr('fd00::5', '10.0.0.0/8'), false)
  })

  it('webhook subscriptions: refuse every non-public literal, naming what it is', () => {
    for (const v of VECTORS.filter((x) => !withZone(x[0]))) {
      const want = expected(v)
      const url = `https://${urlHost(v[0])}/h`
      if (want === null) assert.doesNotThrow(() => checkWebhookUrl(url, []), v[0])
      else assert.throws(() => checkWebhookUrl(url, []), (e: Error) => e.message.includes(` is ${want.kind}:`), v[0])
      if (want?.reach === 'private') assert.doesNotThrow(() => checkWebhookUrl(url, ['0.0.0.0/0', '::/0']), 'the deployment allows private targets')
      if (want?.kind === LINK) assert.throws(() => checkWebhookUrl(url, LOOPBACK_AND_PRIVATE), v[0])
    }
  })

  it('webhook deliveries and MCP: refuse every non-public literal, and every name resolving to one', async () => {
    for (const v of VECTORS) {
      const want = expected(v)
      const literal = refusedHost(urlHost(v[0]), WEBHOOK_REFUSED)
      assert.equal(literal === null ? null : literal.split(' is ')[1]!.split(';')[0], want?.kind ?? null, v[0])
      const resolved = await new Promise<Error | null>((done) => {
        const resolve = (_h: string, _o: object, cb: (err: null, a: LookupAddress[]) => void) => cb(null, [{ address: v[0], family: isIP(v[0]) }])
        guardedLookup({ allowPrivate: [], refused: WEBHOOK_REFUSED, resolve })('vector.example', { all: true }, (err) => done(err))
      })
      assert.equal(resolved?.message.startsWith(`host vector.example resolves to ${want?.kind}; `) ?? null, want === null ? null : true, v[0])
    }
    const fetch = guardedFetch({ allowPrivate: [] })
    for (const v of VECTORS.filter((x) => !withZone(x[0]) && expected(x) !== null)) {
      await assert.rejects(fetch(`http://${urlHost(v[0])}/mcp`), (e: Error) => e.message.includes(` is ${expected(v)!.kind}; ${MCP_REFUSED}`), v[0])
    }
  })
})
