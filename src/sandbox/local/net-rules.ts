/**
 * nftables scripts for sandbox networking. Each is applied whole with `nft -f -`, so a change is
 * atomic: a sandbox never runs under half a ruleset.
 */

/** Name of the sandbox-side interface, the same in every sandbox namespace. */
export const SANDBOX_IF = 'eth0'
/** Name of the table inside each sandbox namespace (the namespace is the sandbox's alone). */
const SANDBOX_TABLE = 'warren_sandbox'

/**
 * The host's table: every packet arriving from a sandbox veth (`<prefix>*`) is dropped unless it
 * answers a connection the host opened (previews), or it is a TCP connection to the egress proxy
 * port, from the sandbox's own address, on its own veth, to its own host-side address (the set
 * `proxy_clients` holds exactly those triples, and only for sandboxes with a non-empty allowlist).
 * Matching the interface with the source stops a sandbox from posing as another; matching the
 * destination keeps it off every other host address. Forwarding from or to sandbox veths is
 * dropped: the proxy terminates connections, so the host never routes sandbox traffic, and an
 * `ip_forward=1` host (Docker, for one) does not change that. The chains are rewritten in one
 * transaction (the proxy port may have changed since the last run) while the set's elements stay,
 * so re-applying the table never cuts an attached sandbox; cleanupOrphans prunes stale elements.
 * Only the service's own user may open a connection into a sandbox (previews, the browser tools'
 * DevTools): a sandbox redirects such connections to its loopback, which no other host user may
 * reach.
 */
export function hostTableScript(table: string, ifPrefix: string, proxyPort: number, serviceUid: number): string {
  const t = `inet ${table}`
  return `add table ${t}
add set ${t} proxy_clients { type ifname . ipv4_addr . ipv4_addr; }
add chain ${t} from_sandbox
add chain ${t} input { type filter hook input priority filter - 10; policy accept; }
add chain ${t} forward { type filter hook forward priority filter - 10; policy accept; }
add chain ${t} output { type filter hook output priority filter - 10; policy accept; }
flush chain ${t} from_sandbox
flush chain ${t} input
flush chain ${t} forward
flush chain ${t} output
add rule ${t} from_sandbox ct state established,related accept
add rule ${t} from_sandbox meta l4proto tcp iifname . ip saddr . ip daddr @proxy_clients tcp dport ${proxyPort} accept
add rule ${t} from_sandbox drop
add rule ${t} input iifname "${ifPrefix}*" jump from_sandbox
add rule ${t} forward iifname "${ifPrefix}*" drop
add rule ${t} forward oifname "${ifPrefix}*" drop
add rule ${t} output oifname "${ifPrefix}*" ct state new meta skuid != ${serviceUid} drop
`
}

export function proxyClientElement(veth: string, sandboxAddr: string, hostAddr: string): string {
  return `{ "${veth}" . ${sandboxAddr} . ${hostAddr} }`
}

/**
 * The sandbox namespace's own table, the first line of defence (the host table is the second):
 * nothing leaves but replies, loopback and (when the allowlist is not empty) TCP to the proxy on
 * the host side of the veth. Nothing enters but replies and new TCP connections from the host
 * side (previews). The sandbox's processes cannot change it: the namespace belongs to the host's
 * user namespace, so they hold no CAP_NET_ADMIN over it.
 *
 * A preview connection from the host is redirected to the sandbox's loopback address, so a server
 * listening on 127.0.0.1 only (most development servers' default) is reachable, and one on 0.0.0.0
 * answers there too. The namespace sets route_localnet on its interface for that (network.ts).
 */
export function sandboxTableScript(hostAddr: string, proxyPort: number | null): string {
  const proxyRule = proxyPort === null ? '' : `    oifname "${SANDBOX_IF}" ip daddr ${hostAddr} tcp dport ${proxyPort} accept\n`
  return `table inet ${SANDBOX_TABLE}
delete table inet ${SANDBOX_TABLE}
table inet ${SANDBOX_TABLE} {
  chain preview {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "${SANDBOX_IF}" ip saddr ${hostAddr} meta l4proto tcp dnat ip to 127.0.0.1
  }
  chain output {
    type filter hook output priority filter; policy drop;
    oifname "lo" accept
    ct state established,related accept
${proxyRule}  }
  chain input {
    type filter hook input priority filter; policy drop;
    iifname "lo" accept
    ct state established,related accept
    iifname "${SANDBOX_IF}" ip saddr ${hostAddr} meta l4proto tcp ct state new accept
  }
}
`
}
