import { it } from 'node:test'
import assert from 'node:assert/strict'
import { derivedSubdomain, previewSubdomainOf } from './preview-address.ts'
import { parseListeningPorts } from './listening-ports.ts'
import { hostOnlyCookies, hostOnlyCookiesInHead } from './preview-cookies.ts'

it('finds the subdomain under the preview domain, whatever the case and the ports', () => {
  const domain = 'preview.localhost:8080'
  assert.equal(previewSubdomainOf('my-site.preview.localhost:8080', domain), 'my-site')
  assert.equal(previewSubdomainOf('MY-SITE.Preview.Localhost:9999', domain), 'my-site')
  assert.equal(previewSubdomainOf('my-site.preview.localhost', domain), 'my-site')
  assert.equal(previewSubdomainOf('my-site.preview.localhost.', 'preview.localhost'), 'my-site')
  for (const host of ['preview.localhost:8080', '127.0.0.1:8080', 'a.b.preview.localhost', 'x.preview.localhost', 'evil.preview.localhost.example.com', 'my-sitepreview.localhost', undefined, '']) {
    assert.equal(previewSubdomainOf(host, domain), null, String(host))
  }
})

it('derives a valid label from a session id', () => {
  assert.equal(derivedSubdomain('ses_AbC123'), 'ses-abc123')
  assert.match(derivedSubdomain(`ses_${'x'.repeat(80)}`), /^[a-z0-9-]{2,63}$/)
})

it('reads listening ports a preview can reach from /proc/net/tcp and tcp6', () => {
  const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1
   1: 00000000:1004 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1
   2: 0200D50A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 3 1
   3: 0100007F:0BB8 0100007F:A000 01 00000000:00000000 00:00000000 00000000  1000        0 4 1
   4: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5 1
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 6 1
   1: 00000000000000000000000001000000:2328 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 7 1
`
  // 3000 (loopback), 4100 (any), 80 (loopback), 8000 (any, IPv6); not 8080 (another address only),
  // not an established connection, not 9000 (IPv6 loopback, which previews cannot reach).
  assert.deepEqual(parseListeningPorts(table), [80, 3000, 4100, 8000])
  assert.deepEqual(parseListeningPorts(''), [])
})

it('keeps cookies on the host that set them', () => {
  assert.deepEqual(hostOnlyCookies(['a=1; Domain=preview.localhost; Path=/', 'b=2; path=/; domain=.x; HttpOnly', 'c=3']), ['a=1; Path=/', 'b=2; path=/; HttpOnly', 'c=3'])
  // Spelt as a browser still reads it: spaces or tabs around the name and the `=`, any case, no value.
  assert.deepEqual(hostOnlyCookies(['a=1; Domain = .x; Path=/', 'b=2;DOMAIN\t=x', 'c=3; Secure; domain', 'domain=4; Path=/']), ['a=1; Path=/', 'b=2', 'c=3; Secure', 'domain=4; Path=/'])
  assert.equal(
    hostOnlyCookiesInHead('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\nset-cookie : ws=1; Domain = .x\r\nX-Domain: kept\r\n\r\n'),
    'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nset-cookie : ws=1\r\nX-Domain: kept\r\n\r\n',
  )
  // A bare CR ends a line too: a Set-Cookie after one is a header of its own.
  assert.equal(
    hostOnlyCookiesInHead('HTTP/1.1 101 Switching Protocols\r\nX-A: 1\rSet-Cookie: cr=1; Domain=.x\r\n\r\n'),
    'HTTP/1.1 101 Switching Protocols\r\nX-A: 1\r\nSet-Cookie: cr=1\r\n\r\n',
  )
  // A Domain folded onto a continuation line is found on the header it continues.
  assert.equal(
    hostOnlyCookiesInHead('HTTP/1.1 101 Switching Protocols\r\nSet-Cookie: ws=1\r\n ; Domain=.x;\r\n\tPath=/\r\nX-A: 1\r\n\r\n'),
    'HTTP/1.1 101 Switching Protocols\r\nSet-Cookie: ws=1; Path=/\r\nX-A: 1\r\n\r\n',
  )
})
