import fs from 'node:fs'
import path from 'node:path'
import { cachedLayout, gzipFileLayer, imageConfig, mmdebstrap, pushLayout, SOURCES, type Registry } from './registry.ts'

/**
 * The toolchain test image: Debian's Go (golang-go, Go 1.19 in bookworm; the host has no Go) with
 * apt, so a workspace on it can build a program and install packages. Built offline by mmdebstrap
 * from the apt sources this machine uses (nothing else downloaded), once per key, and kept in
 * ~/.cache/warren-test-images like the minimal image (test/registry.ts).
 *
 * What keeps it small and quick to build, since a fresh CI machine builds it once:
 * - `--variant=apt`: the essential packages and apt, nothing of `required` or `important`.
 * - merged /usr by mmdebstrap's hook, not by the usrmerge package (which pulls in perl and its
 *   modules: 40 MB).
 * - dpkg path excludes (DPKG_EXCLUDES): documentation, manuals, translations, and the parts of Go
 *   that building a program does not use (the compiler's own packages compiled, 145 MB; the
 *   profiling and inspection tools; Go's own tests and test data). They are written by a setup
 *   hook into a file of the image's own, not given as `--dpkgopt`: mmdebstrap then pipes every
 *   essential archive through its Python tar filter, which took two thirds of the build here.
 *   The essential packages' documentation, extracted before dpkg reads the excludes, is removed
 *   by the customize hook. The excludes stay in the image, so what the agent installs is slim too.
 * - `force-unsafe-io`: dpkg does not fsync each file it unpacks.
 * - no translations (`Acquire::Languages "none"`), in the image as well: `apt-get update` inside
 *   fetches only the package lists.
 * Built here in 120 s on a loaded 2-core machine (26 s user, 23 s system): 286 MB of tar,
 * 86 MB gzipped. mmdebstrap removes the package lists at the end, so `apt-get update` inside
 * fetches them anew.
 */
const GO = '/usr/lib/go-1.19'
export const DPKG_EXCLUDES = [
  '/usr/share/doc/*',
  '/usr/share/man/*',
  '/usr/share/locale/*',
  '/usr/share/info/*',
  '/usr/share/lintian/*',
  `${GO}/pkg/linux_amd64/cmd/*`,
  ...['pprof', 'trace', 'api', 'doc', 'objdump', 'addr2line', 'nm', 'fix', 'dist'].map((t) => `${GO}/pkg/tool/linux_amd64/${t}`),
  '/usr/share/go-1.19/src/cmd/*',
  '/usr/share/go-1.19/src/*/testdata/*',
  '/usr/share/go-1.19/src/*_test.go',
  '/usr/share/go-1.19/test/*',
]

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`
const MMDEBSTRAP = [
  '--variant=apt',
  '--include=golang-go',
  '--skip=output/dev',
  '--format=tar',
  '--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr',
  '--dpkgopt=force-unsafe-io',
  '--aptopt=Acquire::Languages "none"',
  `--setup-hook=mkdir -p "$1/etc/dpkg/dpkg.cfg.d" && printf '%s\\n' ${DPKG_EXCLUDES.map((p) => quote(`path-exclude=${p}`)).join(' ')} > "$1/etc/dpkg/dpkg.cfg.d/90slim"`,
  '--customize-hook=rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/usr/share/info/*',
  'bookworm',
]
const CONFIG = { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'], WorkingDir: '/' }

/** The toolchain image's OCI layout (tag `toolchain`), built once per key and kept. */
export function toolchainImageLayout(): Promise<string> {
  return cachedLayout('toolchain', { v: 1, args: MMDEBSTRAP, config: CONFIG }, async (work) => {
    const tarFile = path.join(work, 'rootfs.tar')
    await mmdebstrap([...MMDEBSTRAP, tarFile, SOURCES])
    const tarBytes = fs.statSync(tarFile).size
    const layer = await gzipFileLayer(work, tarFile)
    fs.rmSync(tarFile)
    return { layers: [layer], config: imageConfig([layer], { config: CONFIG }), tarBytes }
  })
}

/** Pushes the toolchain image with skopeo to `registry` as `name:tag`. */
export async function pushToolchainImage(registry: Registry, name: string, tag: string): Promise<void> {
  await pushLayout(await toolchainImageLayout(), 'toolchain', registry, name, tag)
}
