// secrets.mjs drives a real `tupper serve` with the published e2b JS SDK
// to check secrets end to end: the Secret API, a sandbox whose network
// rule sends a secret as a header to the fake internet that
// e2e/secrets_test.go builds (api.allowed.test), and the secret's value
// found nowhere in the sandbox. The test then checks, from the fake
// internet's record, which request carried which value.
//
//   SECRET_NAME=<name> SECRET1=<value> SECRET2=<value> BLUE_KEY=<a key of another team>
//   FAKE_B=203.0.113.10 node secrets.mjs e2b@2.51.0
//
// Requests go to https://api.allowed.test/secret-<n>: 1 carries SECRET1,
// 2, 2b and 2c carry SECRET2 (after Secret.update), 3 must not reach the
// upstream (after Secret.destroy), nor must the sandbox's attempts to
// steer the header elsewhere (secret-stolen-<n>); secret-plain goes over
// plain HTTP, with the sandbox's own header only. Each step prints "ok   <step>"; the first
// failure "FAIL <step>: …".

import assert from 'node:assert/strict'
import process from 'node:process'

import { onFailure, step } from './steps.mjs'

const moduleName = (process.argv[2] ?? 'e2b@2.51.0').replace(/^e2b@/, 'e2b-')
const { Sandbox, Secret, SecretNotFoundError, CommandExitError } = await import(moduleName)
const env = (k) => {
  const v = process.env[k]
  if (!v) {
    console.error(`${k} is not set`)
    process.exit(2)
  }
  return v
}
const NAME = env('SECRET_NAME'), SECRET1 = env('SECRET1'), SECRET2 = env('SECRET2'), BLUE = env('BLUE_KEY')
const FAKE_B = env('FAKE_B')
const HOST = 'api.allowed.test'
const created = []
onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

// sh runs cmd and returns {code, out}, whatever the exit code.
async function sh(s, cmd) {
  try {
    const r = await s.commands.run(cmd, { timeoutMs: 120_000 })
    return { code: 0, out: r.stdout + r.stderr }
  } catch (err) {
    if (!(err instanceof CommandExitError)) throw err
    return { code: err.exitCode, out: err.stdout + err.stderr }
  }
}

// request asks https://api.allowed.test/<path> from inside s (trusting
// the daemon's egress CA, as every sandbox does) and returns the status
// and the body.
async function request(s, path) {
  const r = await sh(s, `curl -sS --max-time 20 -H 'X-Api-Key: from-the-sandbox' -w '\\nstatus=%{http_code}' https://${HOST}/${path}`)
  assert.equal(r.code, 0, `curl ${path}: ${r.out}`)
  const m = r.out.match(/\nstatus=(\d+)$/)
  assert.ok(m, r.out)
  return { status: Number(m[1]), body: r.out.slice(0, m.index) }
}

// notIn asserts that no value is in text.
function notIn(text, what) {
  for (const v of [SECRET1, SECRET2]) assert.ok(!text.includes(v), `${what} holds a secret's value`)
}

console.log(`secrets: ${moduleName} against ${process.env.E2B_API_URL}`)

let info
await step('Secret.create, getInfo, exists and list: metadata only, never the value', async () => {
  info = await Secret.create(NAME, SECRET1, { metadata: { owner: 'e2e' } })
  assert.match(info.secretId, /^sec_/)
  assert.equal(info.name, NAME.toLowerCase())
  assert.equal(info.version, 1)
  assert.deepEqual(info.metadata, { owner: 'e2e' })
  assert.ok(info.createdAt instanceof Date && !isNaN(info.createdAt), `createdAt ${info.createdAt}`)
  const byName = await Secret.getInfo(NAME)
  const byId = await Secret.getInfo(info.secretId)
  assert.equal(byName.secretId, info.secretId)
  assert.equal(byId.name, info.name)
  assert.equal(await Secret.exists(NAME), true)
  assert.equal(await Secret.exists('no-such-secret'), false)
  await assert.rejects(Secret.create(NAME, 'again'), (err) => /already|exists|409/i.test(err.message))
  // Two more, to page through with limit 1.
  await Secret.create(`${NAME}-b`, 'b-value')
  await Secret.create(`${NAME}-c`, 'c-value')
  const pager = Secret.list({ limit: 1 })
  const names = []
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    pages++
    for (const s of items) names.push(s.name)
  }
  assert.deepEqual(names, [info.name, `${info.name}-b`, `${info.name}-c`])
  assert.equal(pages, 3)
  notIn(JSON.stringify([info, byName, byId, names]), 'an answer')
  await Secret.destroy(`${NAME}-b`)
  await Secret.destroy(`${NAME}-c`)
})

let s
await step('a rule names the secret: the upstream gets the value, the sandbox and getInfo never see it', async () => {
  s = await Sandbox.create({
    timeoutMs: 300_000,
    network: {
      allowOut: [HOST],
      denyOut: ['0.0.0.0/0'],
      rules: { [HOST]: [{ transform: { headers: { 'X-Api-Key': `Bearer ${Secret.fill(NAME)}` } } }] },
    },
  })
  created.push(s)
  const r = await request(s, 'secret-1')
  assert.equal(r.status, 200, r.body)
  assert.match(r.body, /hello from/)
  notIn(r.body, 'the answer inside the sandbox')

  const got = await s.getInfo()
  const shown = JSON.stringify(got)
  notIn(shown, 'getInfo')
  assert.ok(!shown.includes('tupper.secret'), `getInfo shows the daemon's reference: ${shown}`)
  assert.equal(got.network?.rules?.[HOST]?.[0]?.transform?.headers?.['X-Api-Key'], '[redacted]', shown)
  const listed = JSON.stringify(await Sandbox.list().nextItems())
  notIn(listed, 'the listing')
})

await step('Secret.update: the next request carries the new value', async () => {
  const up = await Secret.update(NAME, SECRET2)
  assert.equal(up.version, 2)
  assert.equal((await Secret.getInfo(info.secretId)).version, 2)
  const r = await request(s, 'secret-2')
  assert.equal(r.status, 200, r.body)
  notIn(r.body, 'the answer inside the sandbox')
})

await step('neither value is anywhere in the sandbox: environment, processes, files, the CA bundle', async () => {
  // Each value is looked for in two halves, joined only in a pipe, so
  // that the looking itself (its command lines) does not hold it.
  const halves = [SECRET1, SECRET2].map((v) => [v.slice(0, v.length >> 1), v.slice(v.length >> 1)])
  const look = await sh(s, `A1='${halves[0][0]}'; A2='${halves[0][1]}'; B1='${halves[1][0]}'; B2='${halves[1][1]}'
pat() { printf '%s%s\n%s%s\n' "$A1" "$A2" "$B1" "$B2"; }
env | grep -cF -f <(pat)
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -acF -f <(pat)
test -s /etc/ssl/certs/ca-certificates.crt && grep -cF -f <(pat) /etc/ssl/certs/ca-certificates.crt
grep -ralsF -f <(pat) / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev
echo searched`)
  assert.equal(look.out.trim(), '0\n0\n0\nsearched', `a value is in the sandbox:\n${look.out}`)
})

await step("another team's key neither sees nor uses the secret", async () => {
  const opts = { apiKey: BLUE }
  await assert.rejects(Secret.getInfo(NAME, opts), SecretNotFoundError)
  await assert.rejects(Secret.getInfo(info.secretId, opts), SecretNotFoundError)
  assert.equal(await Secret.exists(NAME, opts), false)
  assert.deepEqual(await Secret.list(opts).nextItems(), [])
  await assert.rejects(Secret.update(info.secretId, 'stolen', opts), SecretNotFoundError)
  assert.equal(await Secret.destroy(NAME, opts), false)
  await assert.rejects(
    Sandbox.create({
      ...opts,
      network: { rules: { [HOST]: [{ transform: { headers: { 'X-Api-Key': Secret.fill(NAME) } } }] } },
    }).then((sb) => { created.push(sb); return sb }),
    (err) => err.message.includes(NAME.toLowerCase()) && /no secret/.test(err.message),
  )
  // The secret is unharmed.
  assert.equal((await Secret.getInfo(NAME)).version, 2)
})

await step('the sandbox cannot steer the header elsewhere: another address, another Host, plain HTTP', async () => {
  // No allowOut: the policy lets this sandbox reach B, whose server has a
  // certificate for every name (the fake CA), so only the proxy's check
  // that the rule's host resolves to the address dialled keeps the
  // header from B.
  const open = await Sandbox.create({
    timeoutMs: 300_000,
    network: { rules: { [HOST]: [{ transform: { headers: { 'X-Api-Key': `Bearer ${Secret.fill(NAME)}` } } }] } },
  })
  created.push(open)
  const elsewhere = await sh(open, `curl -sS --max-time 20 --resolve ${HOST}:443:${FAKE_B} https://${HOST}/secret-stolen-1`)
  assert.notEqual(elsewhere.code, 0, `a request for ${HOST} sent to ${FAKE_B} went through: ${elsewhere.out}`)
  const otherHost = await sh(open, `curl -sS --max-time 20 -H 'Host: b.test' -w '\nstatus=%{http_code}' https://${HOST}/secret-stolen-2`)
  assert.match(otherHost.out, /status=421$/, otherHost.out)
  const plain = await sh(open, `curl -sS --max-time 20 -H 'X-Api-Key: from-the-sandbox' http://${HOST}/secret-plain`)
  assert.equal(plain.code, 0, plain.out)
  notIn(elsewhere.out + otherHost.out + plain.out, 'what the sandbox got back')
  // The rule still works where it should.
  const r = await request(open, 'secret-2c')
  assert.equal(r.status, 200, r.body)
})

await step('an unknown name is refused at create and at updateNetwork, naming it', async () => {
  await assert.rejects(
    Sandbox.create({ network: { rules: { [HOST]: [{ transform: { headers: { A: Secret.fill('nope-nope') } } }] } } })
      .then((sb) => { created.push(sb); return sb }),
    (err) => err.message.includes('nope-nope'),
  )
  await assert.rejects(
    s.updateNetwork({ allowOut: [HOST], denyOut: ['0.0.0.0/0'], rules: { [HOST]: [{ transform: { headers: { A: Secret.fill('nope-nope') } } }] } }),
    (err) => err.message.includes('nope-nope'),
  )
  // The refused update left the rule in force.
  const r = await request(s, 'secret-2b')
  assert.equal(r.status, 200, r.body)
})

await step('Secret.destroy: the request fails in the proxy and never reaches the upstream', async () => {
  assert.equal(await Secret.destroy(NAME), true)
  assert.equal(await Secret.destroy(NAME), false)
  assert.equal(await Secret.exists(info.secretId), false)
  const r = await request(s, 'secret-3')
  assert.equal(r.status, 502, r.body)
  assert.match(r.body, /no longer exists/)
  assert.ok(!r.body.includes('${'), `the refusal shows a placeholder: ${r.body}`)
})

await Promise.allSettled(created.map((sb) => sb.kill()))
console.log('secrets: all steps passed')
