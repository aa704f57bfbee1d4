import { createRequire } from 'node:module'
import type TurndownService from 'turndown'

// Loaded at the first page read, not at start: turndown and its DOM (domino) were a tenth of the
// CPU every process of the service spent loading its modules, most of which never fetch a page.
const require = createRequire(import.meta.url)
let turndown: TurndownService | undefined
function converter(): TurndownService {
  if (turndown) return turndown
  const Turndown = require('turndown') as typeof TurndownService
  turndown = new Turndown({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' })
  // What a reader never sees is not text: scripts, styles, and the page's furniture.
  turndown.remove(['script', 'style', 'noscript', 'template', 'iframe', 'canvas', 'head'])
  turndown.remove((node) => node.nodeName.toLowerCase() === 'svg')
  return turndown
}

/** A page as readable Markdown: headings, links, lists and code kept, markup and scripts gone. */
export function htmlToMarkdown(html: string): string {
  return converter()
    .turndown(html)
    .replace(/\n{3,}/g, '\n\n')
    .trim()
}
