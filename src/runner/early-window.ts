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
   * opens its own). Taken once.
   */
  async take(callId: string, sandbox: Sandbox): Promise<ChangeWindow | null> {
    if (this.held?.callId !== callId) return null
    const opened = await this.held.opened
    this.held = null
    if (!opened) return null
    // The workspace came back as another sandbox meanwhile: that window says nothing of this one.
    if (opened.sandbox !== sandbox) {
      void opened.window.close().catch(() => {})
      return null
    }
    return opened.window
  }

  /** Closes a window nobody took. */
  drop(): void {
    const held = this.held
    this.held = null
    void held?.opened.then((o) => o?.window.close()).catch(() => {})
  }
}
