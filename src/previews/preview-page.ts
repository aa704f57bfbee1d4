import type { ServerResponse } from 'node:http'

const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/**
 * The service's own answer on a preview address when it cannot show the site: a small readable
 * page (a person is usually looking), never a bare connection error.
 */
export function previewPage(status: number, title: string, detail: string): { status: number; body: string } {
  const body = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>${escape(title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#222}h1{font-size:1.4rem}p{color:#444}small{color:#888}</style>
</head><body><h1>${escape(title)}</h1><p>${escape(detail)}</p><small>Warren preview · ${status}</small></body></html>
`
  return { status, body }
}

export function sendPage(res: ServerResponse, page: { status: number; body: string }): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  res.writeHead(page.status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(page.body) })
  res.end(page.body)
}

/** The same page as a raw HTTP/1.1 response, for a WebSocket upgrade that cannot be served. */
export function rawPage(page: { status: number; body: string }, reason: string): string {
  return `HTTP/1.1 ${page.status} ${reason}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(page.body)}\r\nconnection: close\r\n\r\n${page.body}`
}

export const PAGES = {
  unknown: () => previewPage(404, 'No preview here', 'No preview is published at this address. It may have been taken down.'),
  notRunning: () =>
    previewPage(502, 'The workspace is not running', 'The workspace behind this preview is not running (it has not started, or it was reclaimed). Send the session a message to bring it back, then start the server again.'),
  nothingListening: (port: number) =>
    previewPage(502, 'Nothing is listening', `Nothing in the workspace is listening on port ${port}. Start the server there (on 0.0.0.0 or 127.0.0.1, port ${port}) and reload.`),
  failed: (port: number, reason: string) => previewPage(502, 'The preview could not be reached', `The server on port ${port} in the workspace did not answer: ${reason}.`),
  // Internal reasons are the service's business: a visitor of a public address is told only what they can act on.
  error: () => previewPage(502, 'The preview could not be served', 'The service could not serve this preview just now. Try again shortly.'),
}
