import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { decodeKey, type Config } from '../config.ts'
import { privateDataDir, PRIVATE_FILE_MODE } from './private-data-dir.ts'
import { secretBox, type SecretBox } from './secret-box.ts'

/**
 * The key that seals secrets at rest: WARREN_ENCRYPTION_KEY when set (required for several
 * processes on one PostgreSQL), else a key file made once under the data folder, readable by
 * the service's user only.
 */
export function loadEncryptionKey(config: Config): Buffer {
  if (config.encryptionKey) return decodeKey(config.encryptionKey)!
  const file = path.join(config.dataDir, 'encryption.key')
  privateDataDir(config.dataDir)
  try {
    fs.writeFileSync(file, randomBytes(32).toString('base64') + '\n', { flag: 'wx', mode: PRIVATE_FILE_MODE })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
  }
  const key = decodeKey(fs.readFileSync(file, 'utf8').trim())
  if (!key) throw new Error(`${file} does not hold a 32-byte key`)
  return key
}

/** The deployment's box: its key, and the previous one while a rotation is under way. */
export function deploymentBox(config: Config): SecretBox {
  return secretBox(loadEncryptionKey(config), config.encryptionKeyPrevious ? [decodeKey(config.encryptionKeyPrevious)!] : [])
}
