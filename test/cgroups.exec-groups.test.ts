import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { detectCgroups, SandboxCgroup } from '../src/sandbox/local/cgroups.ts'
import { removeCgroupParent } from './cgroup-parent.ts'

/**
 * Exec groups (one per command, in the tracking hierarchy): an emptied one is kept for the next
 * command instead of being removed and made again, and one that still holds a process (what a
 * command left in the background) is never handed to another command.
 */
const host = detectCgroups()
const skip = process.getuid?.() !== 0 ? 'needs root' : host.version === null ? 'needs cgroups' : false
const parent = `warren-execgroups-${randomBytes(3).toString('hex')}`
const cg = new SandboxCgroup(host, parent, 'sb')

after(async () => {
  if (skip) return
  await cg.destroy()
  removeCgroupParent(parent)
})

describe('exec groups', { skip }, () => {
  it('hands an emptied group to the next command, never one a background process still holds', async () => {
    cg.create()
    const first = cg.newExec()!
    assert.ok(cg.removeExec(first), 'an empty group is released')
    const again = cg.newExec()!
    assert.equal(again, first, 'the emptied group is used again')
    assert.ok(fs.existsSync(path.join(cg.trackDir!, again)))
    // A process joins it (as a command's background process would) and outlives the command.
    const sleeper = spawn('sleep', ['1000'], { stdio: 'ignore' })
    await new Promise((r) => sleeper.once('spawn', r))
    fs.writeFileSync(path.join(cg.trackDir!, again, 'cgroup.procs'), String(sleeper.pid))
    assert.equal(cg.removeExec(again), false, 'a group holding a process is kept for it')
    const next = cg.newExec()!
    assert.notEqual(next, again, 'a busy group is never handed out')
    assert.deepEqual(cg.pids(next), [])
    await cg.kill(again)
    await new Promise((r) => (sleeper.exitCode !== null || sleeper.signalCode !== null ? r(null) : sleeper.once('exit', r)))
    // Once empty it is released, and a released group is handed out once only.
    for (let i = 0; i < 100 && !cg.removeExec(again); i++) await new Promise((r) => setTimeout(r, 10))
    assert.ok(cg.removeExec(next))
    const a = cg.newExec()!
    const b = cg.newExec()!
    assert.notEqual(a, b)
    assert.deepEqual(new Set([a, b]), new Set([again, next]))
  })
})
