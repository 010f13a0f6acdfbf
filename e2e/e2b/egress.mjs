// egress.mjs drives a real `tupper serve` with the published e2b JS SDK to
// check the network policy end to end, against the fake internet that
// e2e/egress_test.go builds in a network namespace (never the real one):
//
//   FAKE_A=198.51.100.10 FAKE_B=203.0.113.10 FAKE_CA=<pem file>
//   HOST_PORT=<a port the host listens on> PRIVATE_ADDR=<private ip:port the test owns>
//   SECRET=<a header value> node egress.mjs e2b@2.51.0
//
// Each step prints "ok   <step>"; the first failure "FAIL <step>: …".

import assert from 'node:assert/strict'
import fs from 'node:fs'
import process from 'node:process'

import { onFailure, step } from './steps.mjs'

const moduleName = (process.argv[2] ?? 'e2b@2.51.0').replace(/^e2b@/, 'e2b-')
const { Sandbox, CommandExitError } = await import(moduleName)
const env = (k) => {
  const v = process.env[k]
  if (!v) {
    console.error(`${k} is not set`)
    process.exit(2)
  }
  return v
}
const A = env('FAKE_A'), B = env('FAKE_B'), CA = fs.readFileSync(env('FAKE_CA'), 'utf8')
// A6 is the fake internet's IPv6 server; HOST6 an IPv6 address of the
// host's own. Both empty when the host has no IPv6 route out.
const A6 = process.env.FAKE_A6 ?? '', HOST6 = process.env.HOST6 ?? ''
const url6 = (path = '/') => `http://[${A6}]${path}`
const HOST_PORT = env('HOST_PORT'), PRIVATE_ADDR = env('PRIVATE_ADDR'), SECRET = env('SECRET')
const created = []

onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

async function create(opts = {}) {
  const s = await Sandbox.create({ timeoutMs: 300_000, ...opts })
  created.push(s)
  // The fake internet's CA, so that curl checks its servers' certificates.
  await s.files.write('/tmp/fake-ca.pem', CA)
  return s
}

// sh runs cmd and returns {code, out}, whatever the exit code.
async function sh(s, cmd) {
  try {
    const r = await s.commands.run(cmd, { timeoutMs: 60_000 })
    return { code: 0, out: r.stdout + r.stderr }
  } catch (err) {
    if (!(err instanceof CommandExitError)) throw err
    return { code: err.exitCode, out: err.stdout + err.stderr }
  }
}

// get fetches url with curl; extra are more curl arguments.
const curl = (s, url, extra = '') => sh(s, `curl -sS --max-time 10 --cacert /tmp/fake-ca.pem ${extra} '${url}'`)

async function reaches(s, url, extra) {
  const r = await curl(s, url, extra)
  assert.equal(r.code, 0, `${url}: curl exited ${r.code}: ${r.out}`)
  assert.match(r.out, /hello from|"Host"/, `${url}: ${r.out}`)
  return r.out
}

// refused asserts that url fails with a refusal, not a timeout (curl 28).
async function refused(s, url, extra) {
  const r = await curl(s, url, extra)
  assert.notEqual(r.code, 0, `${url} was reached: ${r.out}`)
  assert.notEqual(r.code, 28, `${url} timed out instead of failing at once: ${r.out}`)
  return r
}

// connect tries a raw TCP connect from the sandbox and reports how it went.
async function connect(s, host, port) {
  const r = await sh(s, `python3 - <<'PY'
import socket, time
t = time.time()
try:
    socket.create_connection((${JSON.stringify(host)}, ${port}), timeout=5).close()
    print("connected")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error", e.errno, e.strerror)
PY`)
  return r.out.trim()
}

// addr6 returns a sandbox's own IPv6 address and its gateway's (the one
// before it: the host side of its /126).
async function addr6(s) {
  const r = await sh(s, `python3 - <<'PY'
import ipaddress
for line in open("/proc/net/if_inet6"):
    f = line.split()
    a = ipaddress.IPv6Address(int(f[0], 16))
    if not a.is_link_local and not a.is_loopback:
        print(a, a - 1)
        break
PY`)
  return r.out.trim().split(/\s+/)
}

async function notConnected(s, host, port) {
  const r = await connect(s, host, port)
  assert.ok(r.startsWith('error'), `${host}:${port}: ${r} (want a refusal at once)`)
}

console.log(`egress: ${moduleName} against ${process.env.E2B_API_URL}`)

let open
await step('default: the internet over HTTP and HTTPS, names through the sandbox resolver', async () => {
  open = await create()
  await reaches(open, `http://${A}/`)
  await reaches(open, 'https://api.allowed.test/')
  await reaches(open, `http://${B}:80/`)
  if (A6) {
    await reaches(open, url6(), '-6')
    await reaches(open, `https://[${A6}]/`, '-6')
  } else {
    await notConnected(open, '2001:db8::10', 80)
  }
  const r = await sh(open, 'cat /etc/resolv.conf; getent hosts $(hostname)')
  assert.match(r.out, /nameserver 10\./, r.out)
  assert.match(r.out, new RegExp(`^10\\.[0-9.]+\\s+${open.sandboxId}$`, 'm'), `the sandbox's own name: ${r.out}`)
  // What the backend told the agent stays with the agent.
  const e = await sh(open, 'env | grep -c ^TUPPER_ || true')
  assert.equal(e.out.trim(), '0', `Tupper's variables leak into commands: ${e.out}`)
})

await step('allowInternetAccess: false reaches nothing, and fails at once', async () => {
  const s = await create({ allowInternetAccess: false })
  await refused(s, `http://${A}/`)
  const r = await refused(s, 'https://api.allowed.test/')
  assert.equal(r.code, 6, `want "could not resolve" (6), got ${r.code}: ${r.out}`)
  if (A6) await refused(s, url6(), '-6')
  const fq = await sh(s, `python3 -c 'import socket,time; t=time.time(); n=socket.getfqdn(); print(n, round(time.time()-t, 3))'`)
  assert.equal(fq.code, 0, fq.out)
  const miss = await sh(s, 'getent hosts missing.test')
  assert.notEqual(miss.code, 0, `a missing name resolved: ${miss.out}`)
  const info = await s.getInfo()
  assert.equal(info.allowInternetAccess, false)
})

await step('denyOut with a CIDR blocks only that range', async () => {
  const s = await create({ network: { denyOut: ['203.0.113.0/24'] } })
  await reaches(s, `http://${A}/`)
  await refused(s, `http://${B}/`)
  await notConnected(s, B, 7000)
  if (A6) {
    await reaches(s, url6(), '-6')
    const s6 = await create({ network: { denyOut: ['::/0'] } })
    await refused(s6, url6(), '-6')
    await reaches(s6, `http://${A}/`)
    const back = await create({ network: { denyOut: ['::/0'], allowOut: [A6] } })
    await reaches(back, url6(), '-6')
  }
})

await step('a domain allowlist admits its domain on 80 and 443 and refuses another on the same address', async () => {
  const s = await create({ network: { allowOut: ['api.allowed.test'], denyOut: ['0.0.0.0/0'] } })
  await reaches(s, 'http://api.allowed.test/')
  await reaches(s, 'https://api.allowed.test/')
  // other.test resolves to the same address: refused by DNS, and by the
  // proxy when the address is given by hand.
  const dns = await refused(s, 'http://other.test/')
  assert.equal(dns.code, 6, dns.out)
  await refused(s, 'http://other.test/', `--resolve other.test:80:${A}`)
  await refused(s, 'https://other.test/', `--resolve other.test:443:${A}`)
  // An allowed name opens only the addresses it resolves to, not any
  // address a client dials by hand with that name.
  await refused(s, 'http://api.allowed.test/', `--resolve api.allowed.test:80:${B}`)
  await refused(s, 'https://api.allowed.test/', `--resolve api.allowed.test:443:${B}`)
  // Other ports follow the IP rules: denied.
  await notConnected(s, A, 7000)
  // Domain checks run on IPv4: IPv6 to 80 and 443 is refused at once, and
  // lookups give no AAAA records, so clients stay on IPv4.
  if (A6) {
    await notConnected(s, A6, 80)
    const aaaa = await sh(s, 'getent ahostsv6 api.allowed.test || true')
    assert.doesNotMatch(aaaa.out, /2001:db8/, aaaa.out)
  }
})

await step('wildcards match subdomains', async () => {
  const s = await create({ network: { allowOut: ['*.allowed.test'], denyOut: ['0.0.0.0/0'] } })
  await reaches(s, 'https://www.allowed.test/')
  await reaches(s, 'http://sub.api.allowed.test/')
  await refused(s, 'https://b.test/')
})

let neighbour
await step('the host, the daemon, a neighbour, metadata and private addresses stay unreachable, even with allowOut 0.0.0.0/0', async () => {
  neighbour = await create()
  const nip = (await sh(neighbour, 'hostname -i')).out.trim().split(/\s+/)[0]
  const s = await create({ network: { allowOut: ['0.0.0.0/0'] } })
  const gw = (await sh(s, "awk '/^nameserver/{print $2}' /etc/resolv.conf")).out.trim()
  const [pip, pport] = PRIVATE_ADDR.split(':')
  const targets = [[gw, HOST_PORT], [gw, 22], [nip, 49983], ['169.254.169.254', 80], [pip, pport]]
  if (A6) {
    const [sb6, gw6] = await addr6(s)
    const [n6] = await addr6(neighbour)
    assert.ok(sb6 && n6, `sandboxes have no IPv6 address: ${sb6} ${n6}`)
    targets.push([gw6, HOST_PORT], [n6, 49983])
    if (HOST6) targets.push([HOST6, HOST_PORT])
  }
  for (const [host, port] of targets) {
    await notConnected(s, host, port)
  }
  await reaches(s, `http://${A}/`)
})

await step('a live update closes and opens a destination, and cuts an open connection', async () => {
  const s = await create()
  await s.commands.run(`curl -sSN --max-time 60 http://${A}/slow > /tmp/slow.out 2>&1; echo "exit $?" >> /tmp/slow.out`, { background: true, timeoutMs: 0 })
  const lines = async () => (await sh(s, 'cat /tmp/slow.out')).out
  for (let i = 0; !(await lines()).includes('line 1 '); i++) {
    if (i > 100) throw new Error(`the slow stream never started: ${await lines()}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  await s.updateNetwork({ denyOut: ['198.51.100.0/24'] })
  for (let i = 0; !(await lines()).includes('exit'); i++) {
    if (i > 100) throw new Error(`the open connection was not cut: ${await lines()}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.doesNotMatch(await lines(), /exit 0/)
  await refused(s, `http://${A}/`)
  await reaches(s, `http://${B}/`)
  await s.updateNetwork({})
  await reaches(s, `http://${A}/`)
})

await step('header injection: the upstream sees the secret, the sandbox never does', async () => {
  const s = await create({
    network: {
      allowOut: ['api.allowed.test'],
      denyOut: ['0.0.0.0/0'],
      rules: { 'api.allowed.test': [{ transform: { headers: { 'X-Api-Key': SECRET } } }] },
    },
  })
  // The sandbox trusts the daemon's CA: plain curl, no --cacert.
  const r = await sh(s, "curl -sS --max-time 10 -H 'X-Api-Key: from-the-sandbox' https://api.allowed.test/headers")
  assert.equal(r.code, 0, r.out)
  assert.ok(r.out.includes(SECRET), `the upstream did not get the header: ${r.out}`)
  assert.ok(!r.out.includes('from-the-sandbox'), `the sandbox's own header was not replaced: ${r.out}`)
  // The secret is looked for in two halves, joined only in a pipe, so
  // that the looking itself (its command lines) does not hold it.
  const half = Math.floor(SECRET.length / 2)
  const look = await sh(s, `S1='${SECRET.slice(0, half)}'; S2='${SECRET.slice(half)}'
pat() { printf '%s%s\\n' "$S1" "$S2"; }
env | grep -cF -f <(pat)
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -acF -f <(pat)
grep -ralsF -f <(pat) / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev
echo searched`)
  assert.match(look.out, /searched/, look.out)
  assert.equal(look.out.trim(), '0\n0\nsearched', `the secret is in the sandbox:\n${look.out}`)
})

await Promise.allSettled(created.map((s) => s.kill()))
console.log('egress: all steps passed')
