import type { Config } from '../../config.ts'
import type { Sandbox } from '../../sandbox/sandbox.ts'
import type { StoredToolEntry } from '../tool-entries.ts'
import { NETWORK_TOOL_TYPES, type NetworkToolType } from '../tools.schema.ts'
import { urlHost, webFetch } from './web-fetch.ts'
import { webSearch } from './web-search.ts'
import type { Page } from 'playwright-core'
import { chromiumAvailable } from '../browser/browser-hub.ts'
import { BROWSER_ACTIONS, browse, browserAct, screenshot, type BrowserOutcome } from '../browser/browser-tools.ts'

export type NetworkToolContext = {
  config: Config
  sandbox: () => Promise<Sandbox>
  /** The session's browser page (its Chromium started in the sandbox on first use). */
  page: () => Promise<Page>
  signal: AbortSignal
}
export type NetworkOutcome = BrowserOutcome

export type NetworkTool = {
  type: NetworkToolType
  description: string
  parameters: Record<string, unknown>
  run(args: Record<string, unknown>, ctx: NetworkToolContext): Promise<NetworkOutcome>
}

/** web_search and image_search: the same question to the search backend, of web pages or of images. */
function searchTool(type: 'web_search' | 'image_search', kind: 'web' | 'images', description: string): NetworkTool {
  return {
    type,
    description,
    parameters: {
      type: 'object',
      properties: { query: { type: 'string' }, count: { type: 'integer', description: 'How many results (default 10, at most 20).' } },
      required: ['query'],
      additionalProperties: false,
    },
    run: (args, ctx) => webSearch(ctx.config.searchUrl!, args, kind, ctx.signal),
  }
}

const NETWORK_TOOLS: NetworkTool[] = [
  {
    type: 'web_fetch',
    description:
      'Fetch a web page (or any text address) and read it as Markdown. Goes out under the workspace’s network policy; follows up to 5 redirects; long pages are cut, with a note.',
    parameters: {
      type: 'object',
      properties: { url: { type: 'string', description: 'An http(s) address.' }, max_chars: { type: 'integer', description: 'Most characters to return (default 50000, at most 200000).' } },
      required: ['url'],
      additionalProperties: false,
    },
    run: async (args, ctx) => webFetch(await ctx.sandbox(), args, ctx.signal),
  },
  searchTool('web_search', 'web', 'Search the web. Returns titles, addresses and snippets; read a result with web_fetch.'),
  searchTool('image_search', 'images', 'Search for images. Returns each image’s address and size with the page it is on.'),
  {
    type: 'browse',
    description:
      'Open an address in a real browser (headless Chromium, under the workspace’s network policy) and read the page: its text and an accessibility snapshot whose elements carry references (ref=e12) for browser_act.',
    parameters: { type: 'object', properties: { url: { type: 'string', description: 'An http(s) address.' } }, required: ['url'], additionalProperties: false },
    run: async (args, ctx) => browse(await ctx.page(), args),
  },
  {
    type: 'browser_act',
    description:
      'Act on the open page: click, type (fills a field with text), select (an option by value or label), press (a key, e.g. Enter, on an element or the page), scroll (to an element, or the page up or down), hover. Returns the page as it is after.',
    parameters: {
      type: 'object',
      properties: {
        action: { type: 'string', enum: [...BROWSER_ACTIONS] },
        ref: { type: 'string', description: 'The element’s reference from the last snapshot, e.g. e12.' },
        text: { type: 'string', description: 'For type: what to enter.' },
        value: { type: 'string', description: 'For select: the option.' },
        key: { type: 'string', description: 'For press: e.g. Enter, Tab, ArrowDown.' },
        direction: { type: 'string', enum: ['up', 'down'], description: 'For scroll without a ref.' },
      },
      required: ['action'],
      additionalProperties: false,
    },
    run: async (args, ctx) => browserAct(await ctx.page(), args),
  },
  {
    type: 'screenshot',
    description: 'A PNG of the open page, shown to you as an image.',
    parameters: { type: 'object', properties: { full_page: { type: 'boolean', description: 'The whole page rather than the viewport.' } }, additionalProperties: false },
    run: async (args, ctx) => screenshot(await ctx.page(), args),
  },
]

const byType = new Map(NETWORK_TOOLS.map((t) => [t.type, t]))

/** Why each network tool type cannot be offered on this deployment; absent when it can. */
export function unavailableNetworkTools(config: Pick<Config, 'disabledTools' | 'searchUrl'>): Map<NetworkToolType, string> {
  const why = new Map<NetworkToolType, string>()
  for (const type of NETWORK_TOOL_TYPES) {
    if (config.disabledTools.includes(type)) why.set(type, 'turned off by WARREN_DISABLED_TOOLS')
    else if (!byType.has(type)) why.set(type, 'not built yet on this service')
    else if ((type === 'web_search' || type === 'image_search') && !config.searchUrl) why.set(type, 'no search backend: set WARREN_SEARCH_URL (a SearXNG instance)')
    else if ((type === 'browse' || type === 'browser_act' || type === 'screenshot') && !chromiumAvailable()) why.set(type, "no Chromium on this host: install Debian's chromium (scripts/setup.sh does)")
  }
  return why
}

/**
 * The network tools the model is offered: exactly the types the configuration names when it names
 * any, none for [], every type otherwise (no configuration, or one of only MCP servers and
 * functions), less what the deployment turned off or cannot run.
 */
export function offeredNetworkTools(config: Pick<Config, 'disabledTools' | 'searchUrl'>, tools: StoredToolEntry[] | null): NetworkTool[] {
  const namedTypes = (tools ?? []).map((t) => t.type).filter((t): t is NetworkToolType => (NETWORK_TOOL_TYPES as readonly string[]).includes(t))
  const named = tools !== null && (tools.length === 0 || namedTypes.length > 0) ? namedTypes : [...NETWORK_TOOL_TYPES]
  const unavailable = unavailableNetworkTools(config)
  return named.filter((t) => !unavailable.has(t)).map((t) => byType.get(t)!)
}

/** What permission rules see of a network call: its domain, when it names one. */
export function networkRuleSubject(type: string, args: Record<string, unknown>): { domain?: string } {
  if (type !== 'web_fetch' && type !== 'browse') return {}
  const host = urlHost(args.url)
  return host ? { domain: host } : {}
}
