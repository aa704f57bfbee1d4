/**
 * OCI image references as Docker reads them: `[host[:port]/]name[:tag][@sha256:digest]`. The first
 * path component is a registry host when it has a dot or a port, or is `localhost`; otherwise the
 * image is Docker Hub's (`debian` is `docker.io/library/debian`). No tag and no digest means
 * `latest`. Anything else is refused with a message that says what is wrong, since the reference
 * comes from a caller.
 */

/** A reference taken apart; `registry` is `host[:port]` as written (lower-case host). */
export type ImageReference = {
  registry: string
  /** The host the registry's API is reached at (Docker Hub's API is not at docker.io). */
  apiHost: string
  repository: string
  tag: string | undefined
  /** `sha256:<64 hex>`: the manifest (or index) the reference pins. */
  digest: string | undefined
  /** The whole reference, spelled out: `registry/repository[:tag][@digest]`. */
  canonical: string
}

/** A reference that cannot be pulled as written; the message is for the caller. */
export class ImageReferenceError extends Error {}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const TAG = /^\w[\w.-]{0,127}$/
const DIGEST = /^sha256:[a-f0-9]{64}$/
const HOST_LABEL = /^(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])$/
const MAX_NAME = 255
const DOCKER_HUB = 'docker.io'

/** Whether `host` (no port) is a DNS name or an IP literal (IPv6 in brackets). */
function validHost(host: string): boolean {
  if (/^\[[0-9a-fA-F:.]+\]$/.test(host)) return true
  return host.length <= 253 && host.split('.').every((label) => HOST_LABEL.test(label))
}

/** Splits `host[:port]`; null when it is not one. */
function splitRegistry(registry: string): { host: string; port: number | undefined } | null {
  const m = /^(\[[^\]]*\]|[^:]+)(?::(\d{1,5}))?$/.exec(registry)
  if (!m || !validHost(m[1]!)) return null
  const port = m[2] === undefined ? undefined : Number(m[2])
  if (port !== undefined && (port < 1 || port > 65535)) return null
  return { host: m[1]!.toLowerCase(), port }
}

export function parseImageReference(input: string): ImageReference {
  const fail = (why: string): never => {
    throw new ImageReferenceError(`image reference ${JSON.stringify(input.length > 300 ? `${input.slice(0, 300)}…` : input)} ${why}`)
  }
  if (typeof input !== 'string' || input.length === 0) fail('is empty')
  if (input.length > 512) fail('is longer than 512 characters')
  if (/\s/.test(input)) fail('contains white space')
  let rest = input
  let digest: string | undefined
  const at = rest.indexOf('@')
  if (at >= 0) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    if (!DIGEST.test(digest)) fail('has a digest that is not sha256: and 64 lower-case hex digits')
  }
  let tag: string | undefined
  const lastSlash = rest.lastIndexOf('/')
  const colon = rest.lastIndexOf(':')
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1)
    rest = rest.slice(0, colon)
    if (!TAG.test(tag)) fail('has a tag that is not 1 to 128 of letters, digits, _ . - (not starting with . or -)')
  }
  const parts = rest.split('/')
  let registry = DOCKER_HUB
  const first = parts[0]!
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    const split = splitRegistry(first)
    if (!split) fail(`has a registry "${first}" that is not host[:port]`)
    registry = split!.port === undefined ? split!.host : `${split!.host}:${split!.port}`
    parts.shift()
  }
  if (parts.length === 0 || parts.some((p) => !COMPONENT.test(p))) {
    fail('has a name that is not lower-case letters and digits in /-separated components (separators . _ __ -)')
  }
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift('library')
  const repository = parts.join('/')
  if (repository.length > MAX_NAME) fail(`has a name longer than ${MAX_NAME} characters`)
  if (tag === undefined && digest === undefined) tag = 'latest'
  const apiHost = registry === DOCKER_HUB ? 'registry-1.docker.io' : registry
  const canonical = `${registry}/${repository}${tag === undefined ? '' : `:${tag}`}${digest === undefined ? '' : `@${digest}`}`
  return { registry, apiHost, repository, tag, digest, canonical }
}
