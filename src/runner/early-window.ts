import type { ChangeWindow, Sandbox } from '../sandbox/sandbox.ts'
import type { ToolCallRequest } from './model-step.ts'

type Opened = { sandbox: Sandbox; window: ChangeWindow } | null

/**
 * The change window of a step's first bash call, opened as soon as the model asked for the call,
 * while the step is being persisted. Opening a window waits on the workspace's watcher (a fence,
 * about 0.2 ms), time the service would otherwise spend idle just before the command; opened
 * early, that wait overlaps the step's writes. The window then also covers those moments, which
 * only a process left running in the background can use: what it changes is reported with this
 * command, as anything it changes while the command runs is. A window its call does not take (the
 * call refused, parked, the turn cut short) is closed. One per session driver.
 */
export class EarlyWindow {
  private readonly live: (sessionId: string) => Promise<Sandbox | null>
  private held: { callId: string; opened: Promise<Opened> } | null = null
  /** Closes the window last taken unless its taker did. */
  private lent: (() => void) | null = null

  constructor(live: (sessionId: string) => Promise<Sandbox | null>) {
    this.live = live
  }

  /** Opens the window of `calls`' first call when it is a bash call and the workspace is up. */
  open(sessionId: string, calls: ToolCallRequest[]): void {
    this.drop()
    const first = calls[0]
    if (first?.toolName !== 'bash') return
    const opened = (async (): Promise<Opened> => {
      const sandbox = await this.live(sessionId).catch(() => null)
      const window = sandbox ? await sandbox.openChanges().catch(() => null) : null
      return sandbox && window ? { sandbox, window } : null
    })()
    this.held = { callId: first.toolCallId, opened }
  }

  /**
   * The window opened for `callId` in `sandbox`, or null when there is none (the bash tool then
   * opens its own). Taken once; lent: closed by its taker, or by drop() once the call is over
   * should the tool have returned without using it (arguments it refused, say).
   */
  async take(callId: string, sandbox: Sandbox): Promise<ChangeWindow | null> {
    const held = this.held
    if (held?.callId !== callId) return null
    // Cleared now, not after the wait: by then another step's window may be held.
    this.held = null
    const opened = await held.opened
    if (!opened) return null
    const { window } = opened
    // The workspace came back as another sandbox meanwhile: that window says nothing of this one.
    if (opened.sandbox !== sandbox) {
      void window.close().catch(() => {}) // a window nobody reads: what it failed to gather is never asked for
      return null
    }
    let closed = false
    const close = () => {
      closed = true
      return window.close()
    }
    this.lent = () => {
      if (!closed) void close().catch(() => {}) // lent out and left: nobody reads what it gathered
    }
    return { close }
  }

  /** Closes a window nobody took, and one taken but left open. */
  drop(): void {
    const held = this.held
    this.held = null
    void held?.opened.then((o) => o?.window.close()).catch(() => {}) // untaken: nobody reads what it gathered
    this.lent?.()
    this.lent = null
  }
}
