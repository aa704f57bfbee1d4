// Two nodes of one service on one host, each with its own sandbox prefix, subnet and uid range
// (WARREN_SANDBOX_PREFIX, WARREN_SANDBOX_SUBNET, WARREN_SANDBOX_UID_BASE): each node's sandboxes
// take their addresses and uids from its own share, one node's start-up clean-up leaves the other's
// cgroups, namespaces and nftables table running, and neither reaches the other's sandboxes through
// its egress proxy.
import { after, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createLocalProvider } from '../src/sandbox/local/create-local.ts'
import type { LocalSandbox } from '../src/sandbox/local/local-sandbox.ts'
import type { SandboxProvider, SandboxSpec } from '../src/sandbox/sandbox.ts'
import { parseIpv4Cidr } from '../src/shared/ipv4-cidr.ts'
import { removeCgroupParent } from './cgroup-parent.ts'

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
const skip = process.getuid?.() !== 0 ? 'needs root' : !['bwrap', 'ip', 'nft', 'curl'].every(has) ? 'needs bubblewrap, ip, nft and curl' : false
if (skip) console.log(`# skipped: ${skip}`)

const tag = (randomBytes(4).readUInt32BE() % 36 ** 3).toString(36).padStart(3, '0')
// One cgroup parent for both nodes, as on a real host: each one's clean-up runs beside the other's groups.
const cgroupParent = `warren-nodes-${tag}`
const uidBase = 300_000 + (randomBytes(2).readUInt16BE() % 600) * 1000 + 800
// Two /24s apart from the default pool (10.213.0.0/16) and from each other, new on every run.
const third = randomBytes(1)[0]!
const nodes = [
  { prefix: `na${tag}`, subnet: `10.231.${third}.0/24`, uidBase, uidCount: 10 },
  { prefix: `nb${tag}`, subnet: `10.232.${third}.0/24`, uidBase: uidBase + 10, uidCount: 10 },
]
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-nodes-'))
fs.chmodSync(dataDir, 0o700)
const providers: SandboxProvider[] = []
after(async () => {
  await Promise.allSettled(providers.map((p) => p.close()))
  fs.rmSync(dataDir, { recursive: true, force: true })
  removeCgroupParent(cgroupParent)
})

const startNode = async (i: number): Promise<SandboxProvider> => {
  const n = nodes[i]!
  const p = await createLocalProvider({ workspaceRoot: path.join(dataDir, n.prefix), cgroupParent, ...n })
  providers.push(p)
  // What a service does first at start: remove what carries its prefix and is not its own.
  await p.cleanupOrphans()
  return p
}

const spec = (id: string, allow: string[] = []): SandboxSpec => ({
  id,
  workspaceMount: '/workspace',
  env: {},
  network: { allow },
  limits: { memoryBytes: 256 * 1024 * 1024, pids: 64, cpus: 1 },
})

const inCidr = (ip: string, cidr: string) => {
  const net = parseIpv4Cidr(cidr)!
  const n = ip.split('.').reduce((acc, part) => acc * 256 + Number(part), 0)
  return n >= net.base && n < net.base + 2 ** (32 - net.bits)
}
const namespaces = () => execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').map((l) => l.split(' ')[0]!)
const tableExists = (prefix: string) => spawnSync('nft', ['list', 'table', 'inet', `warren_${prefix}`], { stdio: 'ignore' }).status === 0

/** Asserts the sandbox is whole and answers: its cgroups, its namespace, a command run in it. */
async function assertAlive(sb: LocalSandbox, prefix: string, label: string) {
  for (const dir of sb.cgroup.dirs) assert.ok(fs.existsSync(dir), `${label}: cgroup ${dir} was removed`)
  assert.ok(namespaces().some((ns) => ns.startsWith(`${prefix}-`)), `${label}: no network namespace of ${prefix} is left`)
  assert.ok(tableExists(prefix), `${label}: the nftables table warren_${prefix} was removed`)
  assert.equal((await sb.exec({ command: 'echo alive' })).stdout.toString(), 'alive\n', label)
}

/** The proxy's answer to a plain HTTP request for `url`, asked from inside the sandbox. */
async function throughProxy(sb: LocalSandbox, url: string): Promise<{ status: number; body: string }> {
  const r = await sb.exec({ command: `curl -sS --max-time 20 -x "$HTTP_PROXY" -w '\\n%{http_code}' ${url}` })
  const lines = r.stdout.toString().trim().split('\n')
  return { status: Number(lines.pop()), body: lines.join('\n').trim() }
}

it('two nodes on one host: addresses from each node\'s subnet, uids from its range, and neither start-up clean-up touches the other', { skip }, async () => {
  const [a, b] = [await startNode(0), await startNode(1)]
  const sbB = (await b.create(spec('ses_b'))) as LocalSandbox
  const addrB = (await sbB.resolvePreview(8080)).host
  const sbA2 = (await a.create(spec('ses_a2'))) as LocalSandbox
  const addrA2 = (await sbA2.resolvePreview(8080)).host
  // Node A's sandbox may ask for both addresses by name: only the proxy's address policy stands between them.
  const sbA = (await a.create(spec('ses_a', [addrB, addrA2]))) as LocalSandbox
  const addrA = (await sbA.resolvePreview(8080)).host

  assert.ok(inCidr(addrA, nodes[0]!.subnet) && inCidr(addrA2, nodes[0]!.subnet), `node A's sandboxes at ${addrA}, ${addrA2}, outside ${nodes[0]!.subnet}`)
  assert.ok(inCidr(addrB, nodes[1]!.subnet), `node B's sandbox at ${addrB}, outside ${nodes[1]!.subnet}`)
  for (const [sb, n] of [[sbA, nodes[0]!], [sbA2, nodes[0]!], [sbB, nodes[1]!]] as const) {
    assert.ok(sb.uid >= n.uidBase && sb.uid < n.uidBase + n.uidCount, `${sb.id} has uid ${sb.uid}, outside ${n.uidBase}–${n.uidBase + n.uidCount - 1}`)
    assert.equal(fs.statSync(path.join(dataDir, n.prefix, sb.id)).uid, sb.uid, `${sb.id}'s workspace is not owned by its uid`)
  }

  // Each node starting again (a restart, or a third node's start) leaves the other's sandboxes whole.
  await a.cleanupOrphans()
  await assertAlive(sbB, nodes[1]!.prefix, "node B's sandbox after node A's clean-up")
  await b.cleanupOrphans()
  await assertAlive(sbA, nodes[0]!.prefix, "node A's sandbox after node B's clean-up")
  await assertAlive(sbA2, nodes[0]!.prefix, "node A's second sandbox after node B's clean-up")

  // Through its egress proxy, A's sandbox reaches neither B's sandbox (another node's subnet is a
  // private range, refused unless WARREN_SANDBOX_ALLOW_PRIVATE covers it) nor its sibling (its own
  // node's subnet, refused whatever that variable says).
  assert.deepEqual(await throughProxy(sbA, `http://${addrB}:8080/`), { status: 403, body: `${addrB} resolves to a forbidden address (a private address)` })
  assert.deepEqual(await throughProxy(sbA, `http://${addrA2}:8080/`), { status: 403, body: `${addrA2} resolves to a forbidden address (another sandbox's address)` })
})

it("a node whose WARREN_SANDBOX_ALLOW_PRIVATE names its own subnet still cannot reach its own sandboxes", { skip }, async () => {
  const n = { prefix: `nc${tag}`, subnet: `10.233.${third}.0/24`, uidBase: uidBase + 20, uidCount: 10 }
  const c = await createLocalProvider({ workspaceRoot: path.join(dataDir, n.prefix), cgroupParent, allowPrivate: [n.subnet], ...n })
  providers.push(c)
  await c.cleanupOrphans()
  const target = (await c.create(spec('ses_c2'))) as LocalSandbox
  const addr = (await target.resolvePreview(8080)).host
  const asker = (await c.create(spec('ses_c1', [addr]))) as LocalSandbox
  assert.deepEqual(await throughProxy(asker, `http://${addr}:8080/`), { status: 403, body: `${addr} resolves to a forbidden address (another sandbox's address)` })
})
