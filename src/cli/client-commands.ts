// The client commands: the public /v1 API through the SDK, for a person at a terminal or a script
// (--json). The service-side commands (serve, tokens, keys) live in main.ts.
import type { Command } from 'commander'
import { loginCommand } from './login-command.ts'
import { sessionsCommands } from './sessions-commands.ts'
import { turnCommands } from './turn-commands.ts'
import { workspaceCommands } from './workspace-commands.ts'

export function clientCommands(program: Command): void {
  loginCommand(program)
  sessionsCommands(program)
  turnCommands(program)
  workspaceCommands(program)
}
