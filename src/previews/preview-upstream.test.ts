import { test } from 'node:test'
import assert from 'node:assert/strict'
import { previewUpstream } from './preview-upstream.ts'

test('previewUpstream: an address is dialled as it is, sent the request’s own Host', () => {
  assert.deepEqual(previewUpstream({ host: '10.213.0.6', port: 3000 }), { origin: 'http://10.213.0.6:3000', host: '10.213.0.6', port: 3000, tls: false, hostHeader: null })
  assert.deepEqual(previewUpstream({ host: 'fd00::6', port: 80 }), { origin: 'http://[fd00::6]:80', host: 'fd00::6', port: 80, tls: false, hostHeader: null })
})

test('previewUpstream: a URL is its origin, over TLS for https, sent its own Host', () => {
  assert.deepEqual(previewUpstream({ url: 'https://3000-abc.example.dev' }), { origin: 'https://3000-abc.example.dev', host: '3000-abc.example.dev', port: 443, tls: true, hostHeader: '3000-abc.example.dev' })
  assert.deepEqual(previewUpstream({ url: 'http://web.ws-1.svc:8080/' }), { origin: 'http://web.ws-1.svc:8080', host: 'web.ws-1.svc', port: 8080, tls: false, hostHeader: 'web.ws-1.svc:8080' })
  assert.deepEqual(previewUpstream({ url: 'http://[fd00::7]:3000' }), { origin: 'http://[fd00::7]:3000', host: 'fd00::7', port: 3000, tls: false, hostHeader: '[fd00::7]:3000' })
})

test('previewUpstream: a URL that is not an http(s) origin is refused', () => {
  for (const url of ['ftp://h/', 'http://h/app', 'http://u:p@h/', 'http://h/?q=1', 'http://h/#x', 'not a url', 'unix:/run/x.sock']) {
    assert.throws(() => previewUpstream({ url }), TypeError, url)
  }
})
