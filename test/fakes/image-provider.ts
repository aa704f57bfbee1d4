// A sandbox provider kind that "runs images" without pulling any: the local provider does the
// sandbox, this wrapper plays the image part of the seam (records what create was asked for,
// reports progress, resolves a digest, or fails with SandboxImageError), so that the service side
// (API, workspace manager) is tested without the local provider's image support.
import { createHash } from 'node:crypto'
import { localKind } from '../../src/sandbox/local/local-kind.ts'
import type { ProviderKind } from '../../src/sandbox/providers.ts'
import { SandboxImageError, type Sandbox, type SandboxImage, type SandboxProvider } from '../../src/sandbox/sandbox.ts'
import { randomText } from '../../src/shared/ids.ts'

export const IMAGE_KIND = 'imagey'

/** The digest the fake resolves a reference to (what a registry's manifest would hash to). */
export const digestOf = (ref: string) => `sha256:${createHash('sha256').update(ref).digest('hex')}`

export type ImageFake = {
  kind: ProviderKind
  /** Every create, in order: the session and the image it was asked for (undefined: the host's system). */
  creates: { id: string; image: SandboxImage | undefined }[]
  /**
   * Refs whose create waits (after reporting a first progress) until released: the test looks at
   * the workspace while its image comes.
   */
  hold(ref: string): () => void
}

/**
 * References with `fail` in them are refused with SandboxImageError; others report two progress
 * steps (one layer of two held, then both; with `chatty` in them a hundred more in between, at
 * once) and come up on digestOf(ref), or on the digest pinned.
 */
export function imageFake(): ImageFake {
  const creates: ImageFake['creates'] = []
  const holds = new Map<string, { gate: Promise<void>; open: () => void }>()
  const kind: ProviderKind = {
    configure(ctx) {
      const start = localKind({ prefix: `i${randomText(4)}`, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 }).configure(ctx)
      return async () => {
        const inner = await start()
        const create = async (spec: Parameters<SandboxProvider['create']>[0]): Promise<Sandbox> => {
          creates.push({ id: spec.id, image: spec.image ? { ...spec.image } : undefined })
          const { image, onImageProgress, ...rest } = spec
          if (!image) return inner.create(rest)
          if (image.ref.includes('fail')) throw new SandboxImageError(`the registry has no tag "${image.ref.split(':').pop()}" of that name (manifest unknown)`)
          const total = 3000
          onImageProgress?.({ ref: image.ref, bytes: 1000, totalBytes: total, layers: 2, layersLeft: 1 })
          // A chatty pull: a report per chunk, all at once (within any one second).
          if (image.ref.includes('chatty')) for (let b = 1001; b < 2000; b += 10) onImageProgress?.({ ref: image.ref, bytes: b, totalBytes: total, layers: 2, layersLeft: 1 })
          const held = holds.get(image.ref)
          if (held) await held.gate
          onImageProgress?.({ ref: image.ref, bytes: total, totalBytes: total, layers: 2, layersLeft: 0 })
          const sandbox = await inner.create(rest)
          const runsOn = { ref: image.ref, digest: image.digest ?? digestOf(image.ref) }
          return new Proxy(sandbox, {
            get: (target, key) => {
              if (key === 'image') return runsOn
              const v = Reflect.get(target, key, target) as unknown
              return typeof v === 'function' ? v.bind(target) : v
            },
          })
        }
        return new Proxy(inner, {
          get: (target, key) => {
            if (key === 'create') return create
            const v = Reflect.get(target, key, target) as unknown
            return typeof v === 'function' ? v.bind(target) : v
          },
        })
      }
    },
  }
  return {
    kind,
    creates,
    hold(ref) {
      let open!: () => void
      const gate = new Promise<void>((r) => (open = r))
      holds.set(ref, { gate, open })
      return () => {
        holds.delete(ref)
        open()
      }
    },
  }
}
