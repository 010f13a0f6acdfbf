// teams.mjs drives a real `tupper serve` with the published e2b JS SDK and
// an API key of another team than the sandbox OTHER_SANDBOX's: the key
// must neither see nor touch it, and must get what E2B answers for a
// sandbox that does not exist; a key of OTHER_SANDBOX's own team sees it.
//
//   E2B_API_URL=… E2B_SANDBOX_URL=… E2B_API_KEY=<a key of team blue> \
//   OTHER_SANDBOX=<a sandbox of the default team> TEAMMATE_KEY=<a key of the default team> \
//   node teams.mjs e2b@2.51.0
//
// Each step prints "ok   <step>"; the first failure prints "FAIL <step>: …"
// and exits with status 1. e2e/teams_test.go runs it.

import assert from 'node:assert/strict'
import process from 'node:process'

import { onFailure, step } from './steps.mjs'

const arg = process.argv[2]
if (!arg) {
  console.error('usage: node teams.mjs e2b@VERSION')
  process.exit(2)
}
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'OTHER_SANDBOX', 'TEAMMATE_KEY']) {
  if (!process.env[v]) {
    console.error(`${v} is not set`)
    process.exit(2)
  }
}
const moduleName = arg.replace(/^e2b@/, 'e2b-')
const { Sandbox, NotFoundError, SandboxNotFoundError } = await import(moduleName)
const other = process.env.OTHER_SANDBOX
const teammate = { apiKey: process.env.TEAMMATE_KEY }
const RUN = `teams-${process.pid}-${Date.now()}`
let own

onFailure(() => own?.kill())

const isA = (cls) => (err) => {
  assert.ok(err instanceof cls, `want ${cls.name}, got ${err?.stack ?? err}`)
  return true
}

// listAll returns the ids of every sandbox a listing shows, page by page.
async function listAll(opts) {
  const ids = []
  const pages = Sandbox.list(opts)
  while (pages.hasNext) {
    for (const s of await pages.nextItems()) ids.push(s.sandboxId)
  }
  return ids
}

await step('Sandbox.create with the other team\'s key', async () => {
  own = await Sandbox.create({ metadata: { run: RUN } })
  assert.equal((await own.commands.run('echo mine')).stdout, 'mine\n')
})

await step('Sandbox.list shows only the own team\'s sandboxes', async () => {
  const ids = await listAll()
  assert.ok(ids.includes(own.sandboxId), `the list ${ids} lacks the own sandbox`)
  assert.ok(!ids.includes(other), `the list shows the other team's sandbox ${other}`)
  const running = await listAll({ query: { state: ['running'] } })
  assert.ok(!running.includes(other), 'the running list shows the other team\'s sandbox')
})

await step('Sandbox.connect to the other team\'s sandbox fails as for a missing one', async () => {
  await assert.rejects(Sandbox.connect(other), isA(SandboxNotFoundError))
  await assert.rejects(Sandbox.connect('nosuchsandbox0000000'), isA(SandboxNotFoundError))
})

await step('Sandbox.getInfo and setTimeout of it fail with NotFoundError', async () => {
  await assert.rejects(Sandbox.getInfo(other), isA(NotFoundError))
  await assert.rejects(Sandbox.setTimeout(other, 3_600_000), isA(NotFoundError))
})

await step('Sandbox.kill of it reports "not found" and kills nothing', async () => {
  assert.equal(await Sandbox.kill(other), false)
  const info = await Sandbox.getInfo(other, teammate)
  assert.equal(info.sandboxId, other)
})

await step('a key of its own team sees it, and not ours', async () => {
  const ids = await listAll(teammate)
  assert.ok(ids.includes(other), `the teammate's list ${ids} lacks ${other}`)
  assert.ok(!ids.includes(own.sandboxId), 'the teammate sees the other team\'s sandbox')
  assert.equal(await Sandbox.kill(own.sandboxId, teammate), false)
})

await step('metadata under tupper. can be neither set nor filtered on', async () => {
  await assert.rejects(Sandbox.create({ metadata: { 'tupper.mcp.owner': 'key_0123' } }), (err) => {
    assert.match(String(err?.message), /reserved/, `want a refusal naming the key reserved, got ${err?.stack ?? err}`)
    return true
  })
  await assert.rejects(listAll({ query: { metadata: { 'tupper.mcp.owner': 'key_0123' } } }), /reserved/)
  const info = await own.getInfo()
  assert.deepEqual(info.metadata, { run: RUN })
})

await step('kill the own sandbox', async () => {
  assert.equal(await own.kill(), true)
})

console.log(`PASS ${moduleName}`)
