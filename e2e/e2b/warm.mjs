// warm.mjs drives a `tupper serve --warm base=2` with the published e2b JS
// SDK, unchanged, as its users do: two users' creates in a row take
// sandboxes booted before them, and the second gets nothing of the
// first's. Run by e2e/warm_test.go, which checks in the daemon's log that
// both creates came from the pool:
//
//   STATE=/path/ids.json node warm.mjs e2b@2.51.0
//
// alice's create brings envs and metadata and gets them; she writes a
// file, starts a process and exports a variable in it. bob's create, the
// next one, sees none of it: no file, no process, no variable, another
// access token; a listing by metadata finds each one's own.

import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import process from 'node:process'

import { onFailure, setStepTimeout, step } from './steps.mjs'

const arg = process.argv[2]
const { STATE } = process.env
if (!arg || !STATE) {
  console.error('usage: STATE=file node warm.mjs e2b@VERSION')
  process.exit(2)
}
const { Sandbox } = await import(arg.replace(/^e2b@/, 'e2b-'))

setStepTimeout(60_000)
const created = []
onFailure(() => Promise.allSettled(created.map((s) => s.kill())))
const run = `warm-${process.pid}`

let alice, bob
await step('alice: Sandbox.create() with envs and metadata', async () => {
  alice = await Sandbox.create({ envs: { GREETING: 'hello alice' }, metadata: { run, user: 'alice' }, timeoutMs: 120_000 })
  created.push(alice)
  const info = await alice.getInfo()
  assert.deepEqual(info.metadata, { run, user: 'alice' })
  assert.ok(info.endAt.getTime() - Date.now() > 60_000, `ends at ${info.endAt.toISOString()}: the create's timeout, not the pool's`)
})

await step("alice: her envs in her commands, her file, her process", async () => {
  const r = await alice.commands.run('echo "$GREETING|$(whoami)|$PWD"')
  assert.equal(r.stdout, 'hello alice|user|/home/user\n')
  await alice.files.write('/home/user/alice.txt', 'alice was here')
  await alice.files.write('/tmp/alice-tmp.txt', 'and here')
  await alice.commands.run('echo "export ALICE_WAS_HERE=1" >> ~/.bashrc')
  await alice.commands.run('sleep 600 # alice', { background: true })
  const procs = await alice.commands.list()
  assert.ok(procs.some((p) => p.args.join(' ').includes('# alice')), `her process is listed: ${JSON.stringify(procs)}`)
})

await step('bob: Sandbox.create() right after, with metadata only', async () => {
  bob = await Sandbox.create({ metadata: { run, user: 'bob' }, timeoutMs: 120_000 })
  created.push(bob)
  assert.notEqual(bob.sandboxId, alice.sandboxId)
})

await step("bob: nothing of alice's", async () => {
  const r = await bob.commands.run('echo "[$GREETING][$ALICE_WAS_HERE]"; ls -A /home/user /tmp; pgrep -c sleep || true')
  assert.equal(r.stdout.split('\n')[0], '[][]', `bob's environment: ${r.stdout}`)
  assert.ok(!r.stdout.includes('alice'), `bob sees alice's files: ${r.stdout}`)
  assert.equal(r.stdout.trim().split('\n').at(-1), '0', `bob sees sleeping processes: ${r.stdout}`)
  assert.equal(await bob.files.exists('/home/user/alice.txt'), false)
  const procs = await bob.commands.list()
  assert.ok(!procs.some((p) => p.args.join(' ').includes('# alice')), `alice's process is in bob's list: ${JSON.stringify(procs)}`)
})

await step("alice's token opens nothing of bob's, and listings find each their own", async () => {
  const stranger = await Sandbox.connect(bob.sandboxId)
  assert.ok((await stranger.commands.run('true')).exitCode === 0)
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/files?path=/etc/hostname`, {
    headers: { 'E2b-Sandbox-Id': bob.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': alice.envdAccessToken ?? 'none' },
  })
  assert.equal(res.status, 401, `alice's access token on bob's sandbox: ${res.status}`)
  for (const [who, want] of [['alice', alice.sandboxId], ['bob', bob.sandboxId]]) {
    const listed = await Sandbox.list({ query: { metadata: { run, user: who } } }).nextItems()
    assert.deepEqual(listed.map((s) => s.sandboxId), [want])
  }
})

await step('both killed', async () => {
  writeFileSync(STATE, JSON.stringify({ alice: alice.sandboxId, bob: bob.sandboxId }))
  await alice.kill()
  await bob.kill()
})
