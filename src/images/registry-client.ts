import { createHash } from 'node:crypto'
import http, { type IncomingMessage } from 'node:http'
import https from 'node:https'
import { isIP } from 'node:net'
import tls from 'node:tls'
import type { PrivatePolicy } from '../shared/address-policy.ts'
import { guardedLookup, isRefusedAddress, refusedHost, type Resolver } from '../shared/guarded-lookup.ts'
import type { ImageReference } from './image-reference.ts'
import { ImagePullError } from './image-pull-error.ts'
import type { RegistryCredentials } from './registry-credentials.ts'

/** How the service reaches registries; the deployment's settings, not the caller's. */
export type RegistryOptions = {
  /** CIDRs of loopback or private addresses registries may be at (as WARREN_MODEL_ALLOW_PRIVATE for model servers). */
  allowPrivate: PrivatePolicy
  /** Registries (`host[:port]`, as in references) reached over plain HTTP although not on loopback. */
  plainHttp?: readonly string[]
  /** The credentials for a registry (`host[:port]`), if any; they go to it and its token server only. */
  credentials?: (registry: string) => RegistryCredentials | undefined
  /** A registry silent this long (no headers, no body bytes) is given up on. Default 30 s. */
  idleTimeoutMs?: number
  /** Name lookups (tests). */
  resolve?: Resolver
  /** A CA certificate (PEM) trusted beside the system's: a registry with a private CA (tests; a deployment may use NODE_EXTRA_CA_CERTS). */
  ca?: string
}

/** A manifest or index as the registry sent it, with the digest of exactly those bytes. */
export type FetchedManifest = { bytes: Buffer; mediaType: string; digest: string }

export type RegistryClient = {
  /** GET a manifest by tag or digest; by digest, the bytes must hash to it. */
  manifest(ref: ImageReference, reference: string, signal?: AbortSignal): Promise<FetchedManifest>
  /** GET a blob; the caller verifies its digest as it reads (the stream is not buffered). */
  blob(ref: ImageReference, digest: string, signal?: AbortSignal): Promise<IncomingMessage>
}

export const MANIFEST_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
]
/** Manifests and indexes are small; a bigger answer is not one. */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024
const MAX_TOKEN_BYTES = 1024 * 1024
const MAX_ERROR_BYTES = 64 * 1024
const MAX_REDIRECTS = 5
const REFUSED = 'set WARREN_IMAGE_ALLOW_PRIVATE to a CIDR list that covers it to pull from a registry there'

const bare = (host: string) => host.replace(/^\[|\]$/g, '').toLowerCase()
const isLoopbackHost = (host: string) => {
  const h = bare(host)
  return h === 'localhost' || h.endsWith('.localhost') || (isIP(h) === 4 && h.startsWith('127.')) || h === '::1'
}

/**
 * Whether a registry (or a redirect's target) is reached over plain HTTP: on a loopback address,
 * as Docker does, or listed by the deployment. Everything else is HTTPS.
 */
export function plainHttpAllowed(hostPort: string, host: string, plainHttp: readonly string[]): boolean {
  return isLoopbackHost(host) || plainHttp.includes(hostPort.toLowerCase()) || plainHttp.includes(bare(host))
}

/** The digest of some bytes, as OCI spells it. */
export const sha256 = (bytes: Buffer) => `sha256:${createHash('sha256').update(bytes).digest('hex')}`

/** Reads a whole (small) answer, refusing past `max` bytes. */
export async function readLimited(res: IncomingMessage, max: number, what: string): Promise<Buffer> {
  const declared = Number(res.headers['content-length'])
  if (Number.isFinite(declared) && declared > max) {
    res.destroy()
    throw new ImagePullError('too_large', `${what} is ${declared} bytes, over the ${max}-byte ceiling`)
  }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > max) {
      res.destroy()
      throw new ImagePullError('too_large', `${what} is over the ${max}-byte ceiling`)
    }
    chunks.push(chunk)
  }
  return Buffer.concat(chunks)
}

/** The auth-params of a WWW-Authenticate challenge: `Bearer realm="…",service="…",scope="…"`. */
function parseChallenge(header: string): { scheme: string; params: Record<string, string> } {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(header)
  const params: Record<string, string> = {}
  for (const p of (m?.[2] ?? '').matchAll(/(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g)) params[p[1]!.toLowerCase()] = (p[2] ?? p[3] ?? '').replace(/\\(.)/g, '$1')
  return { scheme: (m?.[1] ?? '').toLowerCase(), params }
}

/**
 * A client of the OCI distribution API (v2) for pulling: manifests and blobs, anonymous or with
 * Basic credentials, or the bearer tokens a registry's token server hands out for them. Every
 * connection, redirects and token servers included, goes through the SSRF guard under
 * `allowPrivate`; redirects are followed (registries send blobs to storage) but each hop is judged
 * again, must stay HTTPS unless plain HTTP is allowed for it, and loses the Authorization header
 * when it leaves the registry's origin.
 */
export function registryClient(opts: RegistryOptions): RegistryClient {
  const plainHttp = (opts.plainHttp ?? []).map((s) => s.toLowerCase())
  const idleMs = opts.idleTimeoutMs ?? 30_000
  const lookup = guardedLookup({ allowPrivate: opts.allowPrivate, refused: REFUSED, resolve: opts.resolve })
  const agents = { 'http:': new http.Agent({ lookup }), 'https:': new https.Agent({ lookup, ...(opts.ca ? { ca: [...tls.rootCertificates, opts.ca] } : {}) }) }
  /** Authorization per registry and repository (a bearer token is scoped to one repository). */
  const authorization = new Map<string, string>()

  const origin = (ref: ImageReference) => {
    const host = ref.apiHost.replace(/:\d+$/, '').replace(/^(\[.*\]).*$/, '$1')
    return `${plainHttpAllowed(ref.apiHost, host, plainHttp) ? 'http' : 'https'}://${ref.apiHost}`
  }

  /** One GET, no redirects followed; rejects with an ImagePullError when no answer comes. */
  function get(url: URL, headers: Record<string, string>, signal: AbortSignal | undefined): Promise<IncomingMessage> {
    const early = refusedHost(url.hostname, REFUSED, opts.allowPrivate)
    if (early) return Promise.reject(new ImagePullError('refused_address', `registry ${url.host}: ${early}`))
    return new Promise((resolve, reject) => {
      const mod = url.protocol === 'https:' ? https : http
      const req = mod.request(url, { method: 'GET', headers, agent: agents[url.protocol as 'http:' | 'https:'], signal, timeout: idleMs }, (res) => {
        // The same idle ceiling while the body comes: a registry that stops sending is given up on.
        // Only while it is still coming: a finished answer's socket may idle on (an error then would have no listener).
        res.setTimeout(idleMs, () => {
          if (!res.complete) res.destroy(new ImagePullError('unreachable', `registry ${url.host} sent nothing for ${idleMs} ms`))
        })
        res.once('end', () => res.setTimeout(0))
        resolve(res)
      })
      req.on('timeout', () => req.destroy(new ImagePullError('unreachable', `registry ${url.host} did not answer within ${idleMs} ms`)))
      req.on('error', (err) => {
        if (err instanceof ImagePullError) reject(err)
        else if (isRefusedAddress(err)) reject(new ImagePullError('refused_address', `registry ${url.host}: ${err.message}`))
        else if (signal?.aborted) reject(signal.reason)
        else reject(new ImagePullError('unreachable', `registry ${url.host} could not be reached: ${(err as NodeJS.ErrnoException).code ?? err.message}`, { cause: err }))
      })
      req.end()
    })
  }

  /** A token from the registry's token server for pulling `repository`. */
  async function bearerToken(ref: ImageReference, params: Record<string, string>, signal: AbortSignal | undefined): Promise<string> {
    let realm: URL
    try {
      realm = new URL(params.realm ?? '')
    } catch {
      throw new ImagePullError('registry_error', `registry ${ref.registry} asked for a token from an invalid realm`)
    }
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && plainHttpAllowed(realm.host, realm.hostname, plainHttp))) {
      throw new ImagePullError('refused_address', `registry ${ref.registry} asked for a token over plain HTTP from ${realm.host}`)
    }
    if (params.service) realm.searchParams.set('service', params.service)
    realm.searchParams.set('scope', `repository:${ref.repository}:pull`)
    const creds = opts.credentials?.(ref.registry)
    const res = await get(realm, creds ? { authorization: creds.basic() } : {}, signal)
    if (res.statusCode === 401 || res.statusCode === 403) {
      res.resume()
      throw new ImagePullError('unauthorized', `registry ${ref.registry} refused ${creds ? 'the credentials' : 'an anonymous pull'} for ${ref.repository}`)
    }
    const body = await readLimited(res, MAX_TOKEN_BYTES, `registry ${ref.registry}'s token answer`)
    if (res.statusCode !== 200) throw new ImagePullError('registry_error', `registry ${ref.registry}'s token server answered ${res.statusCode}`)
    let token: unknown
    try {
      const parsed = JSON.parse(body.toString('utf8')) as { token?: unknown; access_token?: unknown }
      token = parsed.token ?? parsed.access_token
    } catch {
      token = undefined
    }
    if (typeof token !== 'string' || token === '' || /[\r\n]/.test(token)) throw new ImagePullError('registry_error', `registry ${ref.registry}'s token server sent no token`)
    return token
  }

  /**
   * GET a path of the registry's API: authenticates when challenged (once), follows redirects,
   * and turns error statuses into ImagePullErrors. Answers a 200's response, body unread.
   */
  async function call(ref: ImageReference, path: string, accept: string | undefined, what: string, signal: AbortSignal | undefined): Promise<IncomingMessage> {
    const key = `${ref.registry}/${ref.repository}`
    const base = new URL(`${origin(ref)}/v2/${ref.repository}/${path}`)
    let challenged = false
    for (;;) {
      let url = base
      let res: IncomingMessage
      for (let hop = 0; ; hop++) {
        const sameOrigin = url.origin === base.origin
        const auth = sameOrigin ? authorization.get(key) : undefined
        res = await get(url, { ...(accept ? { accept } : {}), ...(auth ? { authorization: auth } : {}) }, signal)
        const status = res.statusCode ?? 0
        if (![301, 302, 303, 307, 308].includes(status)) break
        res.resume()
        if (hop >= MAX_REDIRECTS) throw new ImagePullError('registry_error', `registry ${ref.registry} redirected ${what} more than ${MAX_REDIRECTS} times`)
        let next: URL
        try {
          next = new URL(String(res.headers.location ?? ''), url)
        } catch {
          throw new ImagePullError('registry_error', `registry ${ref.registry} redirected ${what} to an invalid address`)
        }
        if (next.protocol !== 'https:' && !(next.protocol === 'http:' && plainHttpAllowed(next.host, next.hostname, plainHttp))) {
          throw new ImagePullError('refused_address', `registry ${ref.registry} redirected ${what} to plain HTTP at ${next.host}`)
        }
        url = next
      }
      const status = res.statusCode ?? 0
      if (status === 200) return res
      if (status === 401 && !challenged) {
        res.resume()
        challenged = true
        const { scheme, params } = parseChallenge(String(res.headers['www-authenticate'] ?? ''))
        const creds = opts.credentials?.(ref.registry)
        if (scheme === 'bearer') authorization.set(key, `Bearer ${await bearerToken(ref, params, signal)}`)
        else if (scheme === 'basic' && creds) authorization.set(key, creds.basic())
        else throw new ImagePullError('unauthorized', `registry ${ref.registry} wants credentials for ${ref.repository} and none are configured`)
        continue
      }
      // The registry's error body names a code (MANIFEST_UNKNOWN...); its free text is not repeated.
      const body = await readLimited(res, MAX_ERROR_BYTES, `registry ${ref.registry}'s error`).catch(() => Buffer.alloc(0)) // an unreadable error body: the status says enough
      let code = ''
      try {
        const first = (JSON.parse(body.toString('utf8')) as { errors?: { code?: unknown }[] }).errors?.[0]?.code
        if (typeof first === 'string' && /^[A-Z_]{1,64}$/.test(first)) code = ` (${first})`
      } catch {
        // Not JSON: the status alone says what happened.
      }
      if (status === 404) throw new ImagePullError('not_found', `registry ${ref.registry} has no ${what}${code}`)
      if (status === 401 || status === 403) throw new ImagePullError('unauthorized', `registry ${ref.registry} refused access to ${ref.repository}${code}`)
      throw new ImagePullError('registry_error', `registry ${ref.registry} answered ${status} for ${what}${code}`)
    }
  }

  return {
    async manifest(ref, reference, signal) {
      const what = `manifest ${ref.repository}:${reference}`.replace(':sha256:', '@sha256:')
      const res = await call(ref, `manifests/${reference}`, MANIFEST_TYPES.join(', '), what, signal)
      const bytes = await readLimited(res, MAX_MANIFEST_BYTES, what)
      const digest = sha256(bytes)
      if (reference.startsWith('sha256:') && digest !== reference) throw new ImagePullError('digest_mismatch', `registry ${ref.registry} sent a ${what} whose bytes hash to ${digest}`)
      return { bytes, mediaType: String(res.headers['content-type'] ?? '').split(';')[0]!.trim(), digest }
    },
    blob(ref, digest, signal) {
      return call(ref, `blobs/${digest}`, undefined, `blob ${digest} in ${ref.repository}`, signal)
    },
  }
}
