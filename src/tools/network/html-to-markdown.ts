import TurndownService from 'turndown'

const turndown = new TurndownService({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' })
// What a reader never sees is not text: scripts, styles, and the page's furniture.
turndown.remove(['script', 'style', 'noscript', 'template', 'iframe', 'canvas', 'head'])
turndown.remove((node) => node.nodeName.toLowerCase() === 'svg')

/** A page as readable Markdown: headings, links, lists and code kept, markup and scripts gone. */
export function htmlToMarkdown(html: string): string {
  return turndown
    .turndown(html)
    .replace(/\n{3,}/g, '\n\n')
    .trim()
}
