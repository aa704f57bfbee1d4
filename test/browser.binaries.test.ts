// The start-up report's check on the browser's binaries: one every user may read runs as a
// process its workspace may ptrace (see readableBrowserBinaries), so the operator is warned.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { readableBrowserBinaries } from '../src/tools/browser/browser-hub.ts'

describe('the browser binaries a workspace could read', () => {
  it('names those every user may read, not those only executable, nor those absent', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-browser-bins-'))
    try {
      const bin = (name: string, mode: number) => {
        const p = path.join(dir, name)
        fs.writeFileSync(p, '#!/bin/sh\n')
        fs.chmodSync(p, mode)
        return p
      }
      const packaged = bin('chromium', 0o755)
      const afterSetup = bin('chrome_crashpad_handler', 0o711)
      const ownerOnly = bin('owner-only', 0o700)
      const absent = path.join(dir, 'absent')
      assert.deepEqual(readableBrowserBinaries([packaged, afterSetup, ownerOnly, absent]), [packaged])
      fs.chmodSync(packaged, 0o711)
      assert.deepEqual(readableBrowserBinaries([packaged, afterSetup, ownerOnly, absent]), [])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
