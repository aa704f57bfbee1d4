import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/** What the gauges read from the store when scraped, one cheap query each. */
export type StoreReads = {
  /** Webhook deliveries in a state. */
  countDeliveries(status: 'pending' | 'dead'): Promise<number>
  /** Unix ms at which the earliest pending delivery fell (or falls) due; null when none is pending. */
  earliestPendingDue(): Promise<number | null>
}

/** States the sandbox gauge reports: a sandbox being started, then the provider's own states. */
export type SandboxCounts = { starting: number; running: number; paused: number }

/**
 * What the node's image cache counts (src/images/image-puller.ts): a pull is one caller's (a
 * sandbox start on an image), however many share one download.
 */
export type ImageMetrics = {
  readonly pullsStarted: Counter
  readonly pullsSettled: Counter<'outcome'>
  /** Pulls that found every layer in the cache (no layer downloaded, none waited for). */
  readonly cacheHits: Counter
  /** Compressed layer bytes received from registries. */
  readonly downloadedBytes: Counter
  /** Layers the sweep removed, unused for the keep time. */
  readonly layersRemoved: Counter
  /** Sets what the cache gauges read at each scrape. */
  countCacheWith(read: () => { bytes: number; layers: number }): void
}

export const IMAGE_PULL_OUTCOMES = ['succeeded', 'failed'] as const

/** Where a node serves its metrics, on the main listener or on its own. */
export const METRICS_PATH = '/metrics'

export const TURN_OUTCOMES = ['completed', 'failed', 'cancelled'] as const

/**
 * The Prometheus metrics of one assembled service (one node), on a registry of its own: tests run
 * many services in one process, and a global registry would mix their series and refuse the second
 * registration of a name. Every part that counts is handed this object; `GET /metrics` prints it.
 */
export type Metrics = {
  readonly registry: Registry
  /**
   * One answered HTTP request. `route` is the route's pattern or a fixed name, never the raw URL:
   * an id in a label would make a series per session.
   */
  request(route: string, method: string, status: number, ms: number): void
  /** Turns this node drives now (a model step or a tool call under way; a parked turn holds no driver). */
  readonly turnsWorking: Gauge
  readonly turnsSettled: Counter<'outcome'>
  /** One model call's seconds, labelled with the provider kind and whether it answered. */
  readonly modelStepSeconds: Histogram<'provider' | 'result'>
  /** One tool call's seconds, labelled with the tool's type (an MCP tool is `mcp`, whatever its name). */
  readonly toolCallSeconds: Histogram<'tool'>
  readonly sandboxStartSeconds: Histogram
  /** Sessions this node took over from a node declared dead (incremented by the lease code). */
  readonly leaseTakeovers: Counter
  readonly streamsOpen: Gauge
  /** Sets the sandbox counter read at each scrape (the sandbox provider's wrapper gives it). */
  countSandboxesWith(count: () => SandboxCounts): void
  /** The node's image cache: pulls, hits, bytes downloaded, its size. */
  readonly images: ImageMetrics
  /** Names this node in `warren_node_info`; until then the series is absent. */
  setNodeId(id: string): void
  /** The exposition, in the Prometheus text format. */
  text(): Promise<string>
  readonly contentType: string
}

const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const MODEL_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320]
const TOOL_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]
const START_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

/**
 * Makes the metrics of one service. `reads` are asked at scrape time; a read that fails leaves its
 * gauge without a sample for that scrape (unknown), rather than failing the whole scrape or
 * repeating a stale value.
 */
export function createMetrics(reads: StoreReads): Metrics {
  const registry = new Registry()
  const registers = [registry]
  collectDefaultMetrics({ register: registry })

  const httpRequests = new Counter({
    name: 'warren_http_requests_total',
    help: 'HTTP requests answered, by route pattern (preview traffic: route="preview"; no route matched: "unmatched"), method and status.',
    labelNames: ['route', 'method', 'status'] as const,
    registers,
  })
  const httpSeconds = new Histogram({
    name: 'warren_http_request_duration_seconds',
    help: 'Seconds from receiving an HTTP request to answering it, by route pattern and method (a stream counts until it ends).',
    labelNames: ['route', 'method'] as const,
    buckets: HTTP_BUCKETS,
    registers,
  })
  const turnsWorking = new Gauge({ name: 'warren_turns_working', help: 'Turns this node is driving now; a turn parked on an answer (function, approval, question) holds no driver and is not counted.', registers })
  const turnsSettled = new Counter({ name: 'warren_turns_settled_total', help: 'Turns settled on this node, by outcome.', labelNames: ['outcome'] as const, registers })
  for (const outcome of TURN_OUTCOMES) turnsSettled.inc({ outcome }, 0)
  const modelStepSeconds = new Histogram({
    name: 'warren_model_step_duration_seconds',
    help: 'Seconds of one model call (one step, one attempt), by provider kind and result (ok, or error when it failed; calls cut by a cancel are left out).',
    labelNames: ['provider', 'result'] as const,
    buckets: MODEL_BUCKETS,
    registers,
  })
  const toolCallSeconds = new Histogram({
    name: 'warren_tool_call_duration_seconds',
    help: 'Seconds one tool call ran, by tool type (built-in and network tools by name, every MCP tool as "mcp"); waits for a person or the caller are not tool time.',
    labelNames: ['tool'] as const,
    buckets: TOOL_BUCKETS,
    registers,
  })
  const sandboxStartSeconds = new Histogram({ name: 'warren_sandbox_start_duration_seconds', help: 'Seconds the sandbox provider took to start a sandbox (successful starts; the wait for a start slot is not counted).', buckets: START_BUCKETS, registers })
  const leaseTakeovers = new Counter({ name: 'warren_lease_takeovers_total', help: "Sessions this node took over after their owner's lease lapsed.", registers })
  const streamsOpen = new Gauge({ name: 'warren_event_streams_open', help: 'Event streams (server-sent events) open on this node.', registers })

  let countSandboxes: () => SandboxCounts = () => ({ starting: 0, running: 0, paused: 0 })
  new Gauge({
    name: 'warren_sandboxes',
    help: "Sandboxes of this node by state: starting (the provider is bringing one up), running, paused (frozen after the idle pause).",
    labelNames: ['state'] as const,
    registers,
    collect() {
      for (const [state, n] of Object.entries(countSandboxes())) this.set({ state }, n)
    },
  })
  const images = imageMetrics(registers)
  const nodeInfo = new Gauge({ name: 'warren_node_info', help: "This node's id (label node_id); always 1.", labelNames: ['node_id'] as const, registers })

  /** A gauge whose one value is read from the store at scrape time. */
  const storeGauge = <L extends string>(name: string, help: string, labelNames: readonly L[], read: (set: (labels: Partial<Record<L, string>>, v: number) => void) => Promise<void>) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers,
      async collect() {
        const values: [Partial<Record<L, string>>, number][] = []
        try {
          await read((labels, v) => void values.push([labels, v]))
        } catch {
          this.reset()
          return
        }
        for (const [labels, v] of values) this.set(labels, v)
      },
    })
  storeGauge('warren_webhook_deliveries', 'Webhook deliveries in the store (every node) by state: pending (owed, waiting or being sent) and dead (given up after the last retry).', ['state'], async (set) => {
    const [pending, dead] = await Promise.all([reads.countDeliveries('pending'), reads.countDeliveries('dead')])
    set({ state: 'pending' }, pending)
    set({ state: 'dead' }, dead)
  })
  storeGauge(
    'warren_event_log_lag_seconds',
    'Seconds the oldest overdue webhook delivery (the outbox of the event log) has waited past its due time; 0 when the workers keep up. A delivery waiting out a retry delay is not late.',
    [],
    async (set) => {
      const due = await reads.earliestPendingDue()
      set({}, due === null ? 0 : Math.max(0, Date.now() - due) / 1000)
    },
  )

  return {
    registry,
    request(route, method, status, ms) {
      httpRequests.inc({ route, method, status })
      httpSeconds.observe({ route, method }, ms / 1000)
    },
    turnsWorking,
    turnsSettled,
    modelStepSeconds,
    toolCallSeconds,
    sandboxStartSeconds,
    leaseTakeovers,
    streamsOpen,
    countSandboxesWith(count) {
      countSandboxes = count
    },
    images,
    setNodeId(id) {
      nodeInfo.reset()
      nodeInfo.set({ node_id: id }, 1)
    },
    text: () => registry.metrics(),
    contentType: registry.contentType,
  }
}

/** The image cache's series: counters the puller moves, gauges read from it at each scrape (none before a puller exists). */
function imageMetrics(registers: Registry[]): ImageMetrics {
  let readCache: (() => { bytes: number; layers: number }) | null = null
  const pullsStarted = new Counter({ name: 'warren_image_pulls_started_total', help: "Image pulls this node started: one for each sandbox start on an image, however many share one download.", registers })
  const pullsSettled = new Counter({ name: 'warren_image_pulls_settled_total', help: 'Image pulls settled on this node, by outcome (succeeded, failed).', labelNames: ['outcome'] as const, registers })
  for (const outcome of IMAGE_PULL_OUTCOMES) pullsSettled.inc({ outcome }, 0)
  const cacheHits = new Counter({ name: 'warren_image_cache_hits_total', help: "Image pulls served from this node's cache: every layer was there, none downloaded or waited for.", registers })
  const downloadedBytes = new Counter({ name: 'warren_image_downloaded_bytes_total', help: 'Compressed image layer bytes this node received from registries (a failed download counts what came).', registers })
  const layersRemoved = new Counter({ name: 'warren_image_layers_removed_total', help: 'Image layers removed from the cache after going unused for WARREN_IMAGE_KEEP_HOURS.', registers })
  new Gauge({
    name: 'warren_image_cache_bytes',
    help: "Bytes this node's image cache takes on disk (unpacked layers and configs).",
    registers,
    collect() {
      if (readCache) this.set(readCache().bytes)
    },
  })
  new Gauge({
    name: 'warren_image_cache_layers',
    help: "Image layers in this node's cache.",
    registers,
    collect() {
      if (readCache) this.set(readCache().layers)
    },
  })
  return {
    pullsStarted,
    pullsSettled,
    cacheHits,
    downloadedBytes,
    layersRemoved,
    countCacheWith(read) {
      readCache = read
    },
  }
}
