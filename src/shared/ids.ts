import { randomBytes } from 'node:crypto'

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz'

/** Random lowercase base-36 text of the given length (about 5.2 bits a character). */
export function randomText(length: number): string {
  const bytes = randomBytes(length * 2)
  let out = ''
  // Rejection sampling keeps every character equally likely.
  for (let i = 0; i < bytes.length && out.length < length; i++) {
    if (bytes[i]! < 252) out += ALPHABET[bytes[i]! % 36]
  }
  return out.length === length ? out : out + randomText(length - out.length)
}

export type IdPrefix = 'org' | 'tok' | 'ses' | 'agt' | 'mc' | 'whk' | 'dlv' | 'envp' | 'envt' | 'int' | 'req'

/** An opaque identifier with its type prefix, e.g. `ses_…`. */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomText(24)}`
}
