import { it, describe } from 'node:test'
import assert from 'node:assert/strict'
import { networkPolicyFor } from '../src/workspaces/network-policy.ts'
import { hostAllowed } from '../src/sandbox/local/net-address-policy.ts'

describe('workspace network policy', () => {
  const config = { sandboxAllowedDomains: ['registry.npmjs.org', 'github.com'] }

  it('adds the session’s allow rules to the deployment list', () => {
    const p = networkPolicyFor(config, [{ decision: 'allow', domain: '*.example.com' }])
    assert.deepEqual(p.allow.sort(), ['*.example.com', 'github.com', 'registry.npmjs.org'])
    assert.equal(hostAllowed('api.example.com', p.allow, p.deny), true)
    assert.equal(hostAllowed('example.org', p.allow, p.deny), false)
  })

  it('lets a deny rule beat a broader allow glob', () => {
    const p = networkPolicyFor(config, [
      { decision: 'allow', domain: '*.example.com' },
      { decision: 'deny', domain: 'secret.example.com' },
    ])
    assert.equal(hostAllowed('secret.example.com', p.allow, p.deny), false)
    assert.equal(hostAllowed('SECRET.example.com'.toLowerCase(), p.allow, p.deny), false)
    assert.equal(hostAllowed('public.example.com', p.allow, p.deny), true)
  })

  it('leaves no network at all when every domain is denied', () => {
    const p = networkPolicyFor(config, [{ decision: 'allow', domain: '**' }, { decision: 'deny', domain: '**' }])
    assert.deepEqual(p.allow, [])
    assert.equal(hostAllowed('github.com', p.allow, p.deny), false)
  })
})
