// A workspace on a toolchain the host lacks, through the real service: Debian's Go with apt
// (test/toolchain-image.ts, built by mmdebstrap and cached), pushed by skopeo to a real registry
// on loopback, root inside its own walls (WARREN_SANDBOX_ROOT_RANGES), turns driven by the fake
// model server. One service and two sessions carry every check, so the image is pulled and
// unpacked once. SQLite only: nothing here depends on the store, and the image is costly.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { lookup } from 'node:dns/promises'
import net from 'node:net'
import { startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, newOrg, NO_RATE_LIMITS, runBash } from './turns.helpers.ts'
import { startRegistry, type Registry } from './registry.ts'
import { pushToolchainImage } from './toolchain-image.ts'

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
const skip = process.getuid?.() !== 0 ? 'needs root' : !['bwrap', 'docker-registry', 'skopeo', 'mmdebstrap'].every(has) ? 'needs bubblewrap, docker-registry, skopeo and mmdebstrap' : false

/** The Debian mirror of the apt sources the image was built from (and apt inside reads). */
const MIRROR = 'deb.debian.org'
const MiB = 1024 * 1024

/** A TCP connect from inside with bash's /dev/tcp: prints `<label> open` or `<label> closed`. */
const tcp = (label: string, host: string, port: number | string) => `(timeout 3 bash -c 'exec 3<>/dev/tcp/${host}/${port}' 2>/dev/null && echo '${label} open' || echo '${label} closed')`
/** A CONNECT through the workspace's egress proxy (its address from HTTP_PROXY): prints `<label> <status line>`. */
const viaProxy = (label: string, target: string) =>
  `echo "${label} $(timeout 5 bash -c 'p=\${HTTP_PROXY#http://}; exec 3<>/dev/tcp/\${p%:*}/\${p##*:}; printf "CONNECT ${target} HTTP/1.1\\r\\nHost: ${target}\\r\\n\\r\\n" >&3; head -1 <&3 | tr -d "\\r"' 2>&1 || echo failed)"`

describe('a workspace on a toolchain image, root inside', { skip }, () => {
  let registry: Registry
  let w: Warren
  let model: FakeModelServer
  let c: ReturnType<typeof client>
  let image: string
  let builder: string
  let other: string
  before(async () => {
    registry = await startRegistry()
    await pushToolchainImage(registry, 'warren/go', '1')
    image = `${registry.host}/warren/go:1`
    // Where the mirror is behind an address the egress proxy refuses by default (here it resolves
    // to a documentation address, 203.0.113.80), the deployment opens exactly that address, as
    // one with a private mirror would; a public mirror needs nothing.
    const mirrorAt = (await lookup(MIRROR, { all: true })).map((a) => `${a.address}/${a.family === 4 ? 32 : 128}`)
    w = await startWarren('sqlite', {
      env: {
        ...NO_RATE_LIMITS,
        WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32',
        WARREN_SANDBOX_ALLOW_PRIVATE: mirrorAt.join(','),
        WARREN_SANDBOX_ROOT_RANGES: '2',
        // Ceilings low enough for the bomb and the hog to reach soon, high enough for go and apt.
        WARREN_SANDBOX_PIDS: '128',
        WARREN_SANDBOX_MEMORY_MB: '512',
      },
    })
    model = await startModelServer({ models: ['m1'] })
    c = client(w, await newOrg(w))
    await c.connect(model, 'openai')
    // On a fresh machine this builds the toolchain image first (two minutes or more under load),
    // past the suite's per-test timeout, which a hook inherits unless told.
  }, { timeout: 15 * 60_000 })
  after(async () => {
    await model?.close()
    await w?.close()
    await registry?.stop()
  })

  it('builds and runs a Go program with the toolchain of the image, which the host lacks', async () => {
    assert.ok(!has('go'), 'the host has no go, so building proves the image toolchain')
    // The mirror in its allow rules: apt inside reaches it through the egress proxy (next test).
    builder = await c.session({ environment: { image }, agent: { permission_rules: [{ decision: 'allow', domain: MIRROR }] } })
    const program = 'package main\n\nimport (\n\t"fmt"\n\t"runtime"\n)\n\nfunc main() { fmt.Printf("built by %s on %s/%s: %d\\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, 6*7) }\n'
    const { turn, output } = await runBash(
      c,
      model,
      builder,
      // The build cache and module folder off /workspace: HOME is /workspace, and Go's cache
      // there would be thousands of changed files (and artifacts) of the turn.
      `mkdir -p hello && cat > hello/main.go <<'EOF'\n${program}EOF\nexport GOCACHE=/tmp/go-build GOPATH=/tmp/go CGO_ENABLED=0 && id -u && cd hello && go build -o /tmp/hello main.go && /tmp/hello && go run main.go`,
      { timeoutS: 600 },
    )
    assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
    assert.match(output, /^0\nbuilt by go1\.19\.\d+ on linux\/amd64: 42\nbuilt by go1\.19\.\d+ on linux\/amd64: 42\n\[exit code: 0\]$/)
  })

  it('installs a package with apt through the egress proxy, and uses it', async () => {
    const { turn, output } = await runBash(
      c,
      model,
      builder,
      'command -v hello || echo "no hello yet"; apt-get update -q >/tmp/apt.log 2>&1 && apt-get install -y -q hello >>/tmp/apt.log 2>&1 || tail -20 /tmp/apt.log; hello && dpkg -s hello | grep Status',
      { timeoutS: 600 },
    )
    assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
    assert.equal(output, 'no hello yet\nHello, world!\nStatus: install ok installed\n[exit code: 0]')
  })

  it('gives a second session on the image none of what the first installed, and walls: no host loopback or metadata address, no host path, no other workspace, no_new_privs', async () => {
    // A host service on every interface, as a careless one would listen.
    const hostService = net.createServer((s) => s.end('hello'))
    await new Promise<void>((r) => hostService.listen(0, '0.0.0.0', r))
    const port = (hostService.address() as net.AddressInfo).port
    try {
      other = await c.session({ environment: { image } })
      const { turn, output } = await runBash(
        c,
        model,
        other,
        [
          'id -u',
          'grep -E "^(NoNewPrivs|Seccomp):" /proc/self/status | tr -s "\\t " " "',
          // The first session's package and files are its own.
          'command -v hello || echo "hello absent"',
          '[ -e /workspace/hello ] && echo "workspace seen" || echo "workspace absent"',
          `for p in '${w.dataDir}' '${process.execPath}' /work /root/.cache; do [ -e "$p" ] && echo "host path $p seen"; done; true`,
          // Loopback inside is its own; the host side of its veth reaches only the proxy.
          tcp('own loopback', '127.0.0.1', port),
          tcp('host side', '$(p=${HTTP_PROXY#http://}; echo ${p%:*})', port),
          tcp('metadata', '169.254.169.254', 80),
          viaProxy('proxy to host loopback', `127.0.0.1:${port}`),
          viaProxy('proxy to metadata', '169.254.169.254:80'),
          // Not on its allow rules (the first session's are its own).
          viaProxy('proxy to the mirror', `${MIRROR}:80`),
        ].join('\n'),
        { timeoutS: 120 },
      )
      assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
      assert.equal(
        output,
        [
          '0',
          'NoNewPrivs: 1',
          'Seccomp: 2',
          'hello absent',
          'workspace absent',
          'own loopback closed',
          'host side closed',
          'metadata closed',
          'proxy to host loopback HTTP/1.1 403 Forbidden',
          'proxy to metadata HTTP/1.1 403 Forbidden',
          'proxy to the mirror HTTP/1.1 403 Forbidden',
          '[exit code: 0]',
        ].join('\n'),
      )
    } finally {
      hostService.close()
    }
  })

  it('holds its cgroup ceilings as root: a fork bomb and a memory hog are stopped there, and both workspaces go on', async () => {
    const bomb = await runBash(c, model, other, 'f() { f | f & }; f; exec sleep 100', { timeoutS: 3 })
    assert.equal(bomb.turn.status, 'completed', JSON.stringify(bomb.turn.error))
    assert.match(bomb.output, /Cannot fork/, 'the bomb met the pids ceiling')
    assert.match(bomb.output, /\[timed out after 3 s; the command was killed\]$/)
    // 1 GiB in one string against a 512 MiB ceiling (perl-base is essential: every Debian image
    // has it); head | tail as in the contract tests takes ten times as long to get there.
    const hog = await runBash(c, model, other, `perl -e '$x = "a" x ${1024 * MiB}'; echo "perl: $?"; echo still here`)
    // Killed alone (the shell says so): the workspace and its shell go on.
    assert.equal(hog.output, 'Killed\nperl: 137\nstill here\n[exit code: 0]')
    // Root inside cannot lift them: the cgroup files are not its to write.
    const lift = await runBash(c, model, other, 'for f in pids.max memory.max; do (echo max > /sys/fs/cgroup/$f) 2>/dev/null && echo "$f lifted"; done; echo checked')
    assert.equal(lift.output, 'checked\n[exit code: 0]')
    const fine = await runBash(c, model, builder, 'echo fine')
    assert.equal(fine.output, 'fine\n[exit code: 0]')
  })
})
