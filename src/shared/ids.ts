import { randomBytes } from 'node:crypto'

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz'

// Random bytes are drawn in blocks: one system call per block instead of one per id keeps id
// generation off the request path's profile.
const POOL_SIZE = 4096
let pool = randomBytes(POOL_SIZE)
let offset = 0

function nextByte(): number {
  if (offset >= POOL_SIZE) {
    pool = randomBytes(POOL_SIZE)
    offset = 0
  }
  return pool[offset++]!
}

/** Random lowercase base-36 text of the given length (about 5.2 bits a character). */
export function randomText(length: number): string {
  let out = ''
  while (out.length < length) {
    const b = nextByte()
    // Rejection sampling keeps every character equally likely.
    if (b < 252) out += ALPHABET[b % 36]
  }
  return out
}

export type IdPrefix = 'org' | 'tok' | 'ses' | 'trn' | 'msg' | 'agt' | 'mc' | 'whk' | 'dlv' | 'envp' | 'envt' | 'int' | 'req' | 'stm' | 'art' | 'node'

/** An opaque identifier with its type prefix, e.g. `ses_…`. */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomText(24)}`
}
