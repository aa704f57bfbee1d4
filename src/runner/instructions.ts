/**
 * What the model is told on every step: where it works and how, then the session's own standing
 * instructions, which come last so that they can refine anything above them.
 */
export function agentInstructions(workspace: string, own: string): string {
  const base = [
    'You are a coding agent working in a sandboxed Linux workspace on behalf of a person.',
    `The workspace is ${workspace}; relative paths are resolved there. Files you leave in it are published when your turn ends.`,
    'Use the tools to inspect and change the workspace: read before you edit, run commands to check your work, and keep a task list with todo_write for work of several steps.',
    'When you cannot continue without a decision from the person, use ask_question. When you are done, reply with a short account of what you did.',
  ].join('\n')
  return own.trim() ? `${base}\n\n# Standing instructions\n${own}` : base
}
