import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

export type TestCert = { dir: string; certPath: string; cert: string; key: string; remove(): void }

/**
 * A self-signed certificate for localhost, this machine's name `vm` and 127.0.0.1, valid a day:
 * what a test receiver serves and a service under test is told to trust (NODE_EXTRA_CA_CERTS).
 */
export function makeTestCert(): TestCert {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-cert-'))
  const certPath = path.join(dir, 'cert.pem')
  const keyPath = path.join(dir, 'key.pem')
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,DNS:vm,IP:127.0.0.1', '-keyout', keyPath, '-out', certPath],
    { stdio: 'ignore' },
  )
  return {
    dir,
    certPath,
    cert: fs.readFileSync(certPath, 'utf8'),
    key: fs.readFileSync(keyPath, 'utf8'),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  }
}
