import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'

/**
 * Encrypts secrets at rest (model keys, webhook secrets, profile values) with AES-256-GCM.
 * The stored text is `v1.<iv>.<tag>.<ciphertext>` in base64url, so a later key rotation can
 * tell versions apart.
 */
export type SecretBox = { seal(plain: string): string; open(sealed: string): string }

/**
 * Seals with `key`; opens with it or, while a rotation is under way, with one of the `previous`
 * keys (the GCM tag tells which key sealed a value: any other fails to authenticate).
 */
export function secretBox(key: Buffer, previous: Buffer[] = []): SecretBox {
  if (previous.length > 0) {
    const boxes = [key, ...previous].map((k) => secretBox(k))
    return {
      seal: boxes[0]!.seal,
      open(sealed) {
        for (const b of boxes) {
          try {
            return b.open(sealed)
          } catch {
            /* sealed under another key */
          }
        }
        throw new Error('unreadable sealed secret: sealed under none of the configured keys')
      },
    }
  }
  if (key.length !== 32) throw new Error('the encryption key must be 32 bytes')
  return {
    seal(plain) {
      const iv = randomBytes(12)
      const c = createCipheriv('aes-256-gcm', key, iv)
      const data = Buffer.concat([c.update(plain, 'utf8'), c.final()])
      return ['v1', iv, c.getAuthTag(), data].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join('.')
    },
    open(sealed) {
      const [v, iv, tag, data] = sealed.split('.')
      if (v !== 'v1' || !iv || !tag || data === undefined) throw new Error('unreadable sealed secret')
      const d = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'))
      d.setAuthTag(Buffer.from(tag, 'base64url'))
      return Buffer.concat([d.update(Buffer.from(data, 'base64url')), d.final()]).toString('utf8')
    },
  }
}
