import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { promisify } from 'node:util'
import zlib from 'node:zlib'
import { Header } from 'tar'

/**
 * The image tests' real parts: a real OCI registry (Debian's docker-registry) on a loopback port
 * with its storage in a temporary folder, a real image built offline by mmdebstrap from the apt
 * sources this machine already uses and pushed by a real client (skopeo), and hand-made layers
 * (hostile ones too) pushed through the registry's own HTTP API.
 *
 * Built images are cached between runs outside the repository, in
 * ~/.cache/warren-test-images/<key>, the key a hash of everything that built it (the mmdebstrap
 * command, its upper layer, the apt sources; see cachedLayout). The minimal image (here) takes 9
 * to 17 s to build (busybox and its libraries, extracted: 14 MB of tar, 5.7 MB gzipped), the
 * toolchain image (test/toolchain-image.ts) about two minutes; reusing them nothing.
 */

const run = promisify(execFile)

export const sha256 = (b: Buffer | string) => `sha256:${createHash('sha256').update(b).digest('hex')}`

export type Registry = {
  /** `127.0.0.1:<port>`, as a reference names it. */
  host: string
  url: string
  stop(): Promise<void>
}

async function freePort(): Promise<number> {
  const srv = net.createServer()
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r))
  const port = (srv.address() as net.AddressInfo).port
  await new Promise((r) => srv.close(r))
  return port
}

/**
 * Starts docker-registry on a free loopback port, storage in a fresh temporary folder, and waits
 * until it answers /v2/. With `auth`, it asks for that user and password (its htpasswd auth: a
 * Basic challenge).
 */
export async function startRegistry(opts: { auth?: { user: string; password: string } } = {}): Promise<Registry> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-registry-'))
  const authConfig: string[] = []
  if (opts.auth) {
    const { stdout } = await run('htpasswd', ['-nbB', opts.auth.user, opts.auth.password])
    fs.writeFileSync(path.join(dir, 'htpasswd'), stdout)
    authConfig.push('auth:', '  htpasswd:', '    realm: warren-test', `    path: ${dir}/htpasswd`)
  }
  for (let attempt = 0; ; attempt++) {
    const port = await freePort()
    const config = path.join(dir, 'config.yml')
    fs.writeFileSync(
      config,
      ['version: 0.1', 'log:', '  level: error', '  accesslog:', '    disabled: true', 'storage:', '  filesystem:', `    rootdirectory: ${dir}/storage`, '  delete:', '    enabled: true', 'http:', `  addr: 127.0.0.1:${port}`, ...authConfig, ''].join('\n'),
    )
    const child: ChildProcess = spawn('docker-registry', ['serve', config], { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
    const url = `http://127.0.0.1:${port}`
    const up = await Promise.race([
      (async () => {
        for (;;) {
          const ok = await fetch(`${url}/v2/`).then(
            (r) => r.status === 200 || (opts.auth !== undefined && r.status === 401),
            () => false, // not listening yet: asked again below
          )
          if (ok) return true
          await new Promise((r) => setTimeout(r, 50))
        }
      })(),
      exited.then(() => false),
    ])
    if (up) {
      return {
        host: `127.0.0.1:${port}`,
        url,
        async stop() {
          child.kill()
          await exited
          fs.rmSync(dir, { recursive: true, force: true })
        },
      }
    }
    // Another process took the port between freePort and the registry's bind: try another.
    if (attempt >= 3) throw new Error(`docker-registry did not start: ${stderr.slice(-2000)}`)
  }
}

// ---- tar and OCI documents, made by hand ----

export type TarEntry = {
  path: string
  type?: 'File' | 'Directory' | 'SymbolicLink' | 'Link' | 'CharacterDevice' | 'BlockDevice' | 'FIFO'
  body?: string | Buffer
  mode?: number
  uid?: number
  gid?: number
  linkpath?: string
}

/** A tar archive of exactly these entries, whatever they say (paths with .., absolute paths, devices). */
export function tarOf(entries: TarEntry[]): Buffer {
  const blocks: Buffer[] = []
  for (const e of entries) {
    const body = e.body === undefined ? Buffer.alloc(0) : Buffer.from(e.body)
    const type = e.type ?? 'File'
    const header = new Header({
      path: e.path,
      type,
      mode: e.mode ?? (type === 'Directory' ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      size: type === 'File' ? body.length : 0,
      mtime: new Date('2024-01-01T00:00:00Z'),
      linkpath: e.linkpath ?? '',
      devmaj: 1,
      devmin: 3,
    })
    const block = Buffer.alloc(512)
    header.encode(block, 0)
    blocks.push(block)
    if (type === 'File' && body.length > 0) blocks.push(body, Buffer.alloc((512 - (body.length % 512)) % 512))
  }
  blocks.push(Buffer.alloc(1024))
  return Buffer.concat(blocks)
}

export type BuiltLayer = { tar: Buffer; blob: Buffer; digest: string; diffId: string; mediaType: string }

export function gzipLayer(tar: Buffer): BuiltLayer {
  const blob = zlib.gzipSync(tar)
  return { tar, blob, digest: sha256(blob), diffId: sha256(tar), mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip' }
}

export function imageConfig(layers: { diffId: string }[], extra: { architecture?: string; config?: object } = {}): Buffer {
  return Buffer.from(
    JSON.stringify({
      architecture: extra.architecture ?? 'amd64',
      os: 'linux',
      config: extra.config ?? { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'], WorkingDir: '/' },
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    }),
  )
}

export function manifestOf(config: Buffer, layers: { digest: string; blob: Buffer; mediaType: string }[]): Buffer {
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.blob.length })),
    }),
  )
}

// ---- the registry's HTTP API, as a client pushes ----

export async function pushBlob(registry: Registry, name: string, blob: Buffer): Promise<string> {
  const digest = sha256(blob)
  const start = await fetch(`${registry.url}/v2/${name}/blobs/uploads/`, { method: 'POST' })
  if (start.status !== 202) throw new Error(`blob upload start: ${start.status} ${await start.text()}`)
  const location = new URL(start.headers.get('location')!, registry.url)
  location.searchParams.set('digest', digest)
  const put = await fetch(location, { method: 'PUT', body: new Uint8Array(blob), headers: { 'content-type': 'application/octet-stream' } })
  if (put.status !== 201) throw new Error(`blob upload: ${put.status} ${await put.text()}`)
  return digest
}

export async function pushManifest(registry: Registry, name: string, reference: string, manifest: Buffer, mediaType = 'application/vnd.oci.image.manifest.v1+json'): Promise<string> {
  const res = await fetch(`${registry.url}/v2/${name}/manifests/${reference}`, { method: 'PUT', body: new Uint8Array(manifest), headers: { 'content-type': mediaType } })
  if (res.status !== 201) throw new Error(`manifest push: ${res.status} ${await res.text()}`)
  return sha256(manifest)
}

/** Pushes an image of these layers (lowest first) under `name:tag`; answers its manifest's digest. */
export async function pushImage(registry: Registry, name: string, tag: string, layers: BuiltLayer[], extra: Parameters<typeof imageConfig>[1] = {}): Promise<{ digest: string; config: Buffer; manifest: Buffer }> {
  const config = imageConfig(layers, extra)
  for (const l of layers) await pushBlob(registry, name, l.blob)
  await pushBlob(registry, name, config)
  const manifest = manifestOf(config, layers)
  return { digest: await pushManifest(registry, name, tag, manifest), config, manifest }
}

// ---- images built by mmdebstrap, cached between runs ----

const CACHE = path.join(os.homedir(), '.cache', 'warren-test-images')
/** The apt sources this machine uses: the images are built from its mirror only. */
export const SOURCES = '/etc/apt/sources.list.d/debian.sources'
/**
 * The busybox package and what it needs (libc), extracted: no maintainer scripts run, nothing
 * downloaded but from the configured mirror. (The extract variant runs no hooks, so what the tests
 * look for beyond Debian's own files is a second layer, SECOND_LAYER.)
 */
const MMDEBSTRAP = ['--variant=extract', '--include=busybox', '--skip=output/dev', '--format=tar', 'bookworm']

/**
 * The minimal image's upper layer: a symbolic link, a hard link, a setuid file, a sticky folder,
 * files owned by another user, a whiteout of a Debian file and an opaque folder.
 */
export const SECOND_LAYER: TarEntry[] = [
  { path: 'bin/sh', type: 'SymbolicLink', linkpath: 'busybox' },
  { path: 'srv/', type: 'Directory' },
  { path: 'srv/hello', body: 'hello from the image\n', mode: 0o755 },
  { path: 'srv/hello-hardlink', type: 'Link', linkpath: 'srv/hello' },
  { path: 'srv/setuid-probe', body: '', mode: 0o4755 },
  { path: 'srv/sticky/', type: 'Directory', mode: 0o1777 },
  { path: 'srv/owned/', type: 'Directory', mode: 0o750, uid: 1234, gid: 2345 },
  { path: 'srv/owned/file', body: 'owned\n', mode: 0o640, uid: 1234, gid: 2345 },
  { path: 'etc/.wh.hostname' },
  { path: 'etc/apt/' , type: 'Directory' },
  { path: 'etc/apt/.wh..wh..opq' },
  { path: 'etc/apt/only-this', body: 'the lower etc/apt is hidden\n' },
]

/** An OCI image layout (the minimal image, tag `minimal`), built once per key and kept. */
export function minimalImageLayout(): Promise<string> {
  return cachedLayout('minimal', { v: 2, args: MMDEBSTRAP, upper: SECOND_LAYER }, async (work) => {
    const tarFile = path.join(work, 'rootfs.tar')
    await mmdebstrap([...MMDEBSTRAP, tarFile, SOURCES])
    const layer = gzipLayer(fs.readFileSync(tarFile))
    fs.rmSync(tarFile)
    const upper = gzipLayer(tarOf(SECOND_LAYER))
    for (const l of [layer, upper]) writeBlob(work, l.blob)
    return { layers: [layer, upper], config: imageConfig([layer, upper]), tarBytes: layer.tar.length }
  })
}

export async function mmdebstrap(args: string[]): Promise<void> {
  await run('mmdebstrap', args, { maxBuffer: 64 * 1024 * 1024 }).catch((err: Error & { stderr?: string }) => {
    throw new Error(`mmdebstrap failed: ${err.stderr?.slice(-2000) ?? err.message}`)
  })
}

const writeBlob = (layout: string, blob: Buffer) => fs.writeFileSync(path.join(layout, 'blobs', 'sha256', sha256(blob).slice(7)), blob)

/** A layer of an image layout: its blob already in the layout's blobs. */
export type LayoutLayer = { digest: string; diffId: string; mediaType: string; size: number }

/**
 * A tar file gzipped into the layout's blobs as a layer, streamed (a toolchain's tar is hundreds
 * of megabytes): its digest, and its diff id (the digest of the tar itself).
 */
export async function gzipFileLayer(layout: string, tarFile: string): Promise<LayoutLayer> {
  const tarHash = createHash('sha256')
  const blobHash = createHash('sha256')
  const part = path.join(layout, 'blobs', 'sha256', 'layer.part')
  let size = 0
  await pipeline(
    fs.createReadStream(tarFile),
    new Transform({ transform: (chunk: Buffer, _enc, done) => (tarHash.update(chunk), done(null, chunk)) }),
    zlib.createGzip(),
    new Transform({ transform: (chunk: Buffer, _enc, done) => (blobHash.update(chunk), (size += chunk.length), done(null, chunk)) }),
    fs.createWriteStream(part),
  )
  const digest = `sha256:${blobHash.digest('hex')}`
  fs.renameSync(part, path.join(layout, 'blobs', 'sha256', digest.slice(7)))
  return { digest, diffId: `sha256:${tarHash.digest('hex')}`, mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', size }
}

/**
 * An OCI image layout tagged `tag`, kept in ~/.cache/warren-test-images under a key that hashes
 * `what` (everything that builds it) with the apt sources it is built from. `build` runs once per
 * key, in a fresh folder whose blobs folder it fills with its layers; the config and manifest are
 * written here. Two test processes building at once both finish; the first rename wins.
 */
export async function cachedLayout(
  tag: string,
  what: unknown,
  build: (work: string) => Promise<{ layers: (LayoutLayer | BuiltLayer)[]; config: Buffer; tarBytes: number }>,
): Promise<string> {
  const key = sha256(JSON.stringify({ what, sources: fs.readFileSync(SOURCES, 'utf8') })).slice(7, 23)
  const dir = path.join(CACHE, key)
  if (fs.existsSync(path.join(dir, 'index.json'))) return dir
  fs.mkdirSync(CACHE, { recursive: true })
  const work = fs.mkdtempSync(path.join(CACHE, `${key}.tmp-`))
  try {
    fs.mkdirSync(path.join(work, 'blobs', 'sha256'), { recursive: true })
    const started = Date.now()
    const { layers, config, tarBytes } = await build(work)
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
        layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: 'blob' in l ? l.blob.length : l.size })),
      }),
    )
    for (const b of [config, manifest]) writeBlob(work, b)
    fs.writeFileSync(path.join(work, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }))
    fs.writeFileSync(
      path.join(work, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: sha256(manifest), size: manifest.length, annotations: { 'org.opencontainers.image.ref.name': tag } }],
      }),
    )
    process.stderr.write(`# built the ${tag} test image in ${Date.now() - started} ms (${tarBytes} bytes of tar) into ${dir}\n`)
    try {
      fs.renameSync(work, dir)
    } catch (err) {
      // Another test process built it at the same time: theirs is the same image.
      if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY' && (err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    return dir
  } finally {
    fs.rmSync(work, { recursive: true, force: true })
  }
}

/** Pushes the image layout `layout` (its tag `tag`) with skopeo to `registry` as `name:ref` (as `creds`, `user:password`, when it asks for them). */
export async function pushLayout(layout: string, tag: string, registry: Registry, name: string, ref: string, creds?: string): Promise<void> {
  await run('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', ...(creds ? ['--dest-creds', creds] : []), `oci:${layout}:${tag}`, `docker://${registry.host}/${name}:${ref}`])
}

/** Pushes the minimal image with skopeo to `registry` as `name:tag` (as `creds`, `user:password`, when it asks for them). */
export async function pushMinimalImage(registry: Registry, name: string, tag: string, creds?: string): Promise<void> {
  await pushLayout(await minimalImageLayout(), 'minimal', registry, name, tag, creds)
}

// ---- a proxy in front of the registry: counts what is asked, and can answer instead ----

export type Proxy = {
  host: string
  /** Requests by `METHOD path`. */
  requests: string[]
  count(pattern: RegExp): number
  /** The most blob answers under way at once (from the request to the answer's end). */
  maxBlobsAtOnce: number
  /** Answers a request instead of the registry when it returns true. */
  intercept: ((req: http.IncomingMessage, res: http.ServerResponse) => boolean) | undefined
  stop(): Promise<void>
}

/** With `tls`, the proxy speaks HTTPS (a registry behind a certificate). */
export async function startProxy(registry: Registry, tls?: { cert: string; key: string }): Promise<Proxy> {
  const target = new URL(registry.url)
  let blobsNow = 0
  const proxy: Proxy = {
    host: '',
    requests: [],
    count: (pattern) => proxy.requests.filter((r) => pattern.test(r)).length,
    intercept: undefined,
    maxBlobsAtOnce: 0,
    stop: async () => {
      server.closeAllConnections()
      await new Promise((r) => server.close(r))
    },
  }
  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    proxy.requests.push(`${req.method} ${req.url}`)
    if (req.url!.includes('/blobs/sha256:')) {
      blobsNow++
      proxy.maxBlobsAtOnce = Math.max(proxy.maxBlobsAtOnce, blobsNow)
      res.once('close', () => blobsNow--)
    }
    if (proxy.intercept?.(req, res)) return
    const up = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: { ...req.headers, host: target.host } }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers)
      upRes.pipe(res)
    })
    up.on('error', () => res.destroy())
    req.pipe(up)
  }
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  proxy.host = `127.0.0.1:${(server.address() as net.AddressInfo).port}`
  return proxy
}

/** Every path under `dir` (relative), for "nothing left behind" checks. */
export function listTree(dir: string): string[] {
  if (!fs.existsSync(dir)) return []
  return (fs.readdirSync(dir, { recursive: true }) as string[]).sort()
}
