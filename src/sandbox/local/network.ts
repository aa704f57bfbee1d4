import { createHash, randomBytes } from 'node:crypto'
import { writeFile } from 'node:fs/promises'
import { DEFAULT_SANDBOX_SUBNET } from './local-settings.ts'
import { logFailure, silentLog, type Log } from '../../shared/log.ts'
import type { NetworkPolicy, SandboxSpec } from '../sandbox.ts'
import type { EgressProxy } from './egress-proxy.ts'
import { run, runQuiet } from './net-exec.ts'
import { hostAddresses, parsePool, pickSlot, slotAt, slotClashes, type Slot } from './net-pool.ts'
import { hostTableScript, proxyClientElement, SANDBOX_IF, sandboxTableScript } from './net-rules.ts'
import { shareNetnsDir } from './netns-dir.ts'

/**
 * Sandbox networking on the local host. Each sandbox gets a network namespace `<prefix>-<short>`
 * holding one end of a veth pair (`eth0`, the `.2` of its own /30) and no default route; the
 * host end is `<prefix><short>` with the `.1`. Nothing is routed: a sandbox with an allowlist
 * reaches only the egress proxy listening on its own `.1`, one without reaches nothing, and the
 * service reaches servers inside it on the `.2` (previews). nftables enforces this twice: inside
 * the namespace (net-rules sandboxTableScript) and on the host (hostTableScript).
 *
 * One process owns a prefix and table on a host: cleanupOrphans removes every namespace and veth
 * carrying the prefix that this process does not hold.
 */
export type SandboxNetwork = {
  /** Makes /run/netns a shared mount (see netns-dir.ts); the provider awaits it before parking any shell. */
  prepare(): Promise<void>
  /** Creates netns `<prefix>-<short id>` + veth pair + address + nft rules for this sandbox. */
  attach(spec: SandboxSpec): Promise<{ netnsName: string | null; env: Record<string, string>; previewHost: string }>
  /** Removes the namespace, the veth, its rules and its proxy listener. Idempotent. */
  detach(id: string): Promise<void>
  /** Deletes every namespace and veth with the prefix not held by this process, and (when none is) the table. */
  cleanupOrphans(): Promise<void>
  /**
   * Changes an attached sandbox's allowlist; rules and proxy listener follow. Processes already
   * running keep their environment: the returned proxy env is for processes started from now on.
   */
  setPolicy(id: string, policy: NetworkPolicy): Promise<Record<string, string>>
  /** The policy behind a source address (and the local address it reached): the proxy's resolveSandbox. */
  resolve(remoteAddress: string, localAddress?: string): { allow: string[]; deny: string[] } | null
  /**
   * Fills the warm pool and keeps it filled from now on (each attach that takes from it starts a
   * refill in the background). Resolves once the pool is full.
   */
  warmUp(): Promise<void>
  /** Removes the pooled namespaces and stops refilling. Attached sandboxes stay (detach them). */
  close(): Promise<void>
}

export type LocalNetworkOptions = {
  proxy: EgressProxy
  /** IPv4 pool cut into one /30 per sandbox (WARREN_SANDBOX_SUBNET). Default DEFAULT_SANDBOX_SUBNET, 10.213.0.0/16 (16384 sandboxes). */
  subnet?: string
  /** Names namespaces (`<prefix>-…`) and host veths (`<prefix>…`); 2–5 characters. Default `wr`. */
  prefix?: string
  /** The host's nftables table (family inet). Default `warren`. */
  table?: string
  /**
   * Namespaces kept fully built ahead of need once warmUp has been called: netns, veth, /30, links
   * up, and the default-deny sandbox table (no egress at all; no proxy_clients element, so the
   * host table drops everything from it too). attach adopts one instead of building. Default 2.
   */
  warm?: number
  /** Where a namespace built ahead that failed is told; silent otherwise. */
  log?: Log
}

const REFILL_DELAY_MS = 100

type Entry = { id: string; netns: string; veth: string; slot: Slot | null; allow: string[]; deny: string[] }

export function localNetwork(opts: LocalNetworkOptions): SandboxNetwork {
  const prefix = opts.prefix ?? 'wr'
  const table = opts.table ?? 'warren'
  if (!/^[a-z][a-z0-9]{1,4}$/.test(prefix)) throw new Error(`network prefix must be 2-5 lowercase letters or digits: ${prefix}`)
  if (!/^[a-z][a-z0-9_]{0,31}$/.test(table)) throw new Error(`invalid nftables table name: ${table}`)
  const pool = parsePool(opts.subnet ?? DEFAULT_SANDBOX_SUBNET)
  const proxy = opts.proxy
  const byId = new Map<string, Entry>()
  const byAddr = new Map<string, Entry>()
  const taken = new Set<number>()
  let tableReady: Promise<void> | null = null
  const warm = opts.warm ?? 2
  /** Pooled namespaces ready to adopt, and those being built: held, never orphans. */
  const ready: Entry[] = []
  const building = new Set<Entry>()
  const inFlight = new Set<Promise<void>>()
  let warming = false
  let closed = false
  let refillTimer: ReturnType<typeof setTimeout> | undefined
  /** Later, not now: a build is ~9 process spawns that would compete with the sandbox being made. */
  const scheduleRefill = () => {
    if (!warming) return
    clearTimeout(refillTimer)
    refillTimer = setTimeout(() => void refill(), REFILL_DELAY_MS).unref()
  }

  const names = (id: string) => {
    // A hash, not the id itself: interface names hold 15 bytes and the id may hold anything.
    const short = createHash('sha256').update(id).digest('hex').slice(0, 10)
    return { netns: `${prefix}-${short}`, veth: `${prefix}${short}` }
  }

  function ensureTable(): Promise<void> {
    tableReady ??= run('nft', ['-f', '-'], hostTableScript(table, prefix, proxy.port, process.getuid?.() ?? 0)).then(
      () => undefined,
      (err) => {
        tableReady = null
        throw err
      },
    )
    return tableReady
  }

  const inNetns = (netns: string, cmd: string[], input?: string) => run('ip', ['netns', 'exec', netns, ...cmd], input)

  function proxyEnv(entry: Entry): Record<string, string> {
    if (entry.allow.length === 0 || !entry.slot) return {}
    const url = `http://${entry.slot.hostAddr}:${proxy.port}`
    const noProxy = 'localhost,127.0.0.1,::1'
    return { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, NO_PROXY: noProxy, no_proxy: noProxy }
  }

  /** Picks a free /30 and puts its `.1` on the host veth, re-checking for a concurrent claim. */
  async function allocate(entry: Entry): Promise<Slot> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const index = pickSlot(pool, await hostAddresses(), taken)
      taken.add(index)
      const slot = slotAt(pool, index)
      let clash = true
      try {
        await run('ip', ['addr', 'add', `${slot.hostAddr}/30`, 'dev', entry.veth])
        // Another process may have taken the same /30 meanwhile; whoever sees the clash moves on.
        clash = slotClashes(pool, index, await hostAddresses(), entry.veth)
      } finally {
        if (clash) taken.delete(index)
      }
      if (!clash) return slot
      await runQuiet('ip', ['addr', 'flush', 'dev', entry.veth])
    }
    throw new Error('could not claim a free sandbox address')
  }

  async function applySandboxRules(entry: Entry, slot: Slot) {
    const script = sandboxTableScript(slot.hostAddr, entry.allow.length > 0 ? proxy.port : null)
    await inNetns(entry.netns, ['nft', '-f', '-'], script)
  }

  async function openProxy(entry: Entry, slot: Slot) {
    await run('nft', ['add', 'element', 'inet', table, 'proxy_clients', proxyClientElement(entry.veth, slot.sandboxAddr, slot.hostAddr)])
    await proxy.listen(slot.hostAddr)
  }

  async function closeProxy(entry: Entry, slot: Slot) {
    await proxy.unlisten(slot.hostAddr)
    proxy.disconnect(slot.sandboxAddr)
    await runQuiet('nft', ['delete', 'element', 'inet', table, 'proxy_clients', proxyClientElement(entry.veth, slot.sandboxAddr, slot.hostAddr)])
  }

  async function teardown(entry: Entry) {
    if (entry.slot) {
      byAddr.delete(entry.slot.sandboxAddr)
      await closeProxy(entry, entry.slot)
      taken.delete(entry.slot.index)
    }
    // Deleting the host end removes the pair at once; deleting the namespace alone is lazy.
    await runQuiet('ip', ['link', 'del', entry.veth])
    await runQuiet('ip', ['netns', 'del', entry.netns])
  }

  /** Drops proxy_clients elements whose veth this process does not hold (left by a crashed run). */
  async function pruneElements(held: Set<string>) {
    let listing: { nftables?: { set?: { elem?: { concat?: string[] }[] } }[] }
    try {
      listing = JSON.parse(await run('nft', ['-j', 'list', 'set', 'inet', table, 'proxy_clients']))
    } catch {
      return
    }
    for (const item of listing.nftables ?? []) {
      for (const { concat } of item.set?.elem ?? []) {
        const [veth, sandboxAddr, hostAddr] = concat ?? []
        if (held.has(veth) || !/^[a-z0-9]+$/.test(veth ?? '') || ![sandboxAddr, hostAddr].every((a) => /^[\d.]+$/.test(a ?? ''))) continue
        await runQuiet('nft', ['delete', 'element', 'inet', table, 'proxy_clients', proxyClientElement(veth, sandboxAddr, hostAddr)])
      }
    }
  }

  async function build(entry: Entry) {
    if (!(await runQuiet('ip', ['netns', 'add', entry.netns]))) {
      // Left by a crashed run with the same id: nothing of ours lives in it.
      await runQuiet('ip', ['link', 'del', entry.veth])
      await run('ip', ['netns', 'del', entry.netns])
      await run('ip', ['netns', 'add', entry.netns])
    }
    // IPv6 off on both ends: no link-local addresses, so IPv4 rules are the whole story.
    await runQuiet('ip', ['netns', 'exec', entry.netns, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1'])
    await run('ip', ['link', 'add', entry.veth, 'type', 'veth', 'peer', 'name', SANDBOX_IF, 'netns', entry.netns])
    await writeFile(`/proc/sys/net/ipv6/conf/${entry.veth}/disable_ipv6`, '1').catch(() => {}) // a host without IPv6 has no such file, and then nothing to turn off
    // Previews are redirected to the sandbox's loopback (net-rules sandboxTableScript), which the
    // kernel routes only with route_localnet on the interface they arrive on.
    await run('ip', ['netns', 'exec', entry.netns, 'sysctl', '-qw', `net.ipv4.conf.${SANDBOX_IF}.route_localnet=1`])
    const slot = await allocate(entry)
    entry.slot = slot
    // Rules before links come up: the sandbox is never reachable without them.
    await applySandboxRules(entry, slot)
    const inside = [`addr add ${slot.sandboxAddr}/30 dev ${SANDBOX_IF}`, `link set ${SANDBOX_IF} up`, 'link set lo up'].join('\n')
    await run('ip', ['-n', entry.netns, '-batch', '-'], inside + '\n')
    await run('ip', ['link', 'set', entry.veth, 'up'])
    if (entry.allow.length > 0) await openProxy(entry, slot)
  }

  /** Builds one pooled namespace under a random name (still `<prefix>-<10 hex>`, so cleanupOrphans knows it). */
  async function buildPooled(): Promise<void> {
    const short = randomBytes(5).toString('hex')
    const entry: Entry = { id: '', netns: `${prefix}-${short}`, veth: `${prefix}${short}`, slot: null, allow: [], deny: [] }
    building.add(entry)
    try {
      await ensureTable()
      await build(entry)
    } catch (err) {
      building.delete(entry)
      await teardown(entry)
      throw err
    }
    building.delete(entry)
    if (closed) await teardown(entry)
    else ready.push(entry)
  }

  /** Starts builds until ready + building reaches `warm`; resolves when those finish. */
  function refill(): Promise<void> {
    const started: Promise<void>[] = []
    while (!closed && ready.length + building.size + started.length < warm) {
      // Built at create instead, where a failure is the create's.
      const p: Promise<void> = buildPooled().catch(logFailure(opts.log ?? silentLog, 'building a sandbox network namespace ahead failed', { component: 'sandbox' })).finally(() => inFlight.delete(p))
      inFlight.add(p)
      started.push(p)
    }
    return Promise.all(started).then(() => undefined)
  }

  return {
    prepare: shareNetnsDir,

    async attach(spec) {
      if (byId.has(spec.id)) throw new Error(`sandbox ${spec.id} already has a network`)
      const allow = [...spec.network.allow]
      const deny = [...(spec.network.deny ?? [])]
      const pooled = ready.shift()
      if (pooled) {
        // Adopt: built with no egress and no proxy element; only an allowlist needs a change.
        const entry: Entry = { ...pooled, id: spec.id, allow, deny }
        byId.set(spec.id, entry)
        scheduleRefill()
        try {
          await ensureTable()
          if (allow.length > 0) {
            await applySandboxRules(entry, entry.slot!)
            await openProxy(entry, entry.slot!)
          }
        } catch (err) {
          byId.delete(spec.id)
          await teardown(entry)
          throw err
        }
        byAddr.set(entry.slot!.sandboxAddr, entry)
        return { netnsName: entry.netns, env: proxyEnv(entry), previewHost: entry.slot!.sandboxAddr }
      }
      const entry: Entry = { id: spec.id, ...names(spec.id), slot: null, allow, deny }
      byId.set(spec.id, entry)
      scheduleRefill()
      try {
        await ensureTable()
        await build(entry)
        byAddr.set(entry.slot!.sandboxAddr, entry)
      } catch (err) {
        byId.delete(spec.id)
        await teardown(entry)
        throw err
      }
      return { netnsName: entry.netns, env: proxyEnv(entry), previewHost: entry.slot!.sandboxAddr }
    },

    async warmUp() {
      if (closed) return
      warming = true
      await refill()
    },

    async close() {
      closed = true
      warming = false
      clearTimeout(refillTimer)
      await Promise.all([...inFlight])
      const pooled = ready.splice(0)
      await Promise.all(pooled.map((e) => teardown(e)))
      // The host table hooks every packet the host receives: it goes with the last namespace of
      // its prefix on this host (another instance sharing the table may still hold some).
      const left = (await run('ip', ['netns', 'list']).catch(() => '')).split('\n').some((l) => l.startsWith(`${prefix}-`))
      if (byId.size === 0 && !left) await runQuiet('nft', ['delete', 'table', 'inet', table])
    },

    async detach(id) {
      const entry = byId.get(id) ?? { id, ...names(id), slot: null, allow: [], deny: [] }
      byId.delete(id)
      await teardown(entry)
    },

    async setPolicy(id, policy) {
      const entry = byId.get(id)
      if (!entry?.slot) throw new Error(`sandbox ${id} has no network`)
      const wasOpen = entry.allow.length > 0
      entry.allow = [...policy.allow]
      entry.deny = [...(policy.deny ?? [])]
      const isOpen = entry.allow.length > 0
      if (wasOpen !== isOpen) {
        await applySandboxRules(entry, entry.slot)
        if (isOpen) await openProxy(entry, entry.slot)
        else await closeProxy(entry, entry.slot)
      }
      return proxyEnv(entry)
    },

    resolve(remoteAddress, localAddress) {
      const entry = byAddr.get(remoteAddress)
      if (!entry?.slot) return null
      // The connection must arrive on the sandbox's own host-side address, not another's.
      if (localAddress !== undefined && localAddress !== entry.slot.hostAddr) return null
      return { allow: entry.allow, deny: entry.deny }
    },

    async cleanupOrphans() {
      const held = new Set([...byId.values(), ...ready, ...building].flatMap((e) => [e.netns, e.veth]))
      const ours = new RegExp(`^${prefix}-?[0-9a-f]{10}$`)
      const namespaces = (await run('ip', ['netns', 'list'])).split('\n').map((l) => l.split(' ')[0])
      const links = (await run('ip', ['-o', 'link', 'show'])).split('\n').map((l) => /^\d+:\s+([^@:\s]+)/.exec(l)?.[1] ?? '')
      for (const link of links) if (ours.test(link) && !link.includes('-') && !held.has(link)) await runQuiet('ip', ['link', 'del', link])
      for (const ns of namespaces) if (ours.test(ns) && ns.includes('-') && !held.has(ns)) await runQuiet('ip', ['netns', 'del', ns])
      if (byId.size === 0 && ready.length === 0 && building.size === 0) {
        await runQuiet('nft', ['delete', 'table', 'inet', table])
        tableReady = null
      } else {
        await pruneElements(held)
      }
    },
  }
}
