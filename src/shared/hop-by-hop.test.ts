import { it } from 'node:test'
import assert from 'node:assert/strict'
import { hopByHop } from './hop-by-hop.ts'

it('drops the fixed hop-by-hop headers and whatever Connection names, however it is written', () => {
  const fixed = ['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']
  for (const connection of [undefined, 'keep-alive', 'Keep-Alive', 'close', 'Upgrade', 'keep-alive, Upgrade']) assert.deepEqual([...hopByHop({ connection })].sort(), [...fixed].sort(), String(connection))
  assert.deepEqual([...hopByHop({ connection: 'keep-alive, X-Secret' })].sort(), [...fixed, 'x-secret'].sort())
  const listed = hopByHop({ connection: ['close', ' X-One ,x-two'] })
  for (const name of [...fixed, 'x-one', 'x-two']) assert.equal(listed.has(name), true, name)
  // A value that merely starts like a plain one is still taken apart.
  assert.equal(hopByHop({ connection: 'keep-alive,x-secret' }).has('x-secret'), true)
})
