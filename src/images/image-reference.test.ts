import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ImageReferenceError, parseImageReference } from './image-reference.ts'

const D = `sha256:${'a'.repeat(64)}`

test('parseImageReference: host, port, path, tag and digest as Docker reads them', () => {
  assert.deepEqual(parseImageReference('127.0.0.1:5000/team/tools:1.2'), { registry: '127.0.0.1:5000', apiHost: '127.0.0.1:5000', repository: 'team/tools', tag: '1.2', digest: undefined, canonical: '127.0.0.1:5000/team/tools:1.2' })
  assert.deepEqual(parseImageReference(`ghcr.io/o/r@${D}`), { registry: 'ghcr.io', apiHost: 'ghcr.io', repository: 'o/r', tag: undefined, digest: D, canonical: `ghcr.io/o/r@${D}` })
  const both = parseImageReference(`Registry.Example.com/a/b:v1@${D}`)
  assert.equal(both.registry, 'registry.example.com', 'the host is lower-cased')
  assert.equal(both.tag, 'v1')
  assert.equal(both.digest, D)
  assert.equal(parseImageReference('localhost/x').registry, 'localhost')
  assert.equal(parseImageReference('[::1]:5000/x:t').registry, '[::1]:5000')
})

test('parseImageReference: no host is Docker Hub, one component is library/, no tag is latest', () => {
  const r = parseImageReference('debian')
  assert.equal(r.registry, 'docker.io')
  assert.equal(r.apiHost, 'registry-1.docker.io')
  assert.equal(r.repository, 'library/debian')
  assert.equal(r.tag, 'latest')
  assert.equal(parseImageReference('user/app:3').repository, 'user/app', 'a first component without a dot or port is a path')
})

test('parseImageReference: malformed references are refused with what is wrong', () => {
  const cases: [string, RegExp][] = [
    ['', /is empty/],
    ['Debian', /lower-case/],
    ['host.io/a//b', /lower-case/],
    ['host.io/a/../b', /lower-case/],
    ['host.io/a:-bad', /tag/],
    ['host.io/a:' + 'x'.repeat(129), /tag/],
    ['host.io/a@sha256:abc', /digest/],
    ['host.io/a@md5:' + 'a'.repeat(32), /digest/],
    ['host.io:99999/a', /registry/],
    ['ho_st.io/a', /registry/],
    ['host.io/a b', /white space/],
    ['x'.repeat(600), /longer than 512/],
    ['host.io/' + 'a'.repeat(300), /longer than 255/],
  ]
  for (const [input, why] of cases) {
    assert.throws(() => parseImageReference(input), (err: Error) => err instanceof ImageReferenceError && why.test(err.message), input)
  }
})
