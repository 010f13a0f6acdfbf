// pause.mjs drives pause, resume, snapshots and fork of a real
// `tupper serve` with the published e2b JS SDK, unchanged, in two phases
// run by e2e/pause_test.go around a restart of the daemon:
//
//   PHASE=before STATE=/path/state.json node pause.mjs e2b@2.51.0
//   (the daemon restarts)
//   PHASE=after  STATE=/path/state.json node pause.mjs e2b@2.51.0
//
// "before" sets a sandbox up (a server holding a value in memory only, a
// counting loop, files in /tmp and the home directory), pauses it and
// checks it holds nothing; "after" resumes it and checks all is as it
// was, then runs the lifecycle options, snapshots and fork.

import assert from 'node:assert/strict'
import { readFileSync, writeFileSync } from 'node:fs'
import process from 'node:process'

import { onFailure, setStepTimeout, step } from './steps.mjs'

const arg = process.argv[2]
const { PHASE, STATE, E2B_API_URL } = process.env
if (!arg || !['before', 'after'].includes(PHASE) || !STATE) {
  console.error('usage: PHASE=before|after STATE=file node pause.mjs e2b@VERSION')
  process.exit(2)
}
const { Sandbox } = await import(arg.replace(/^e2b@/, 'e2b-'))

setStepTimeout(120_000)
const created = []
onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

async function waitUntil(cond, what, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

// portFetch asks port of the sandbox for / through the daemon's data plane,
// as a client of a server in the sandbox does.
async function portFetch(sandboxId, port) {
  const res = await fetch(`${E2B_API_URL}/`, { headers: { 'E2b-Sandbox-Id': sandboxId, 'E2b-Sandbox-Port': String(port) } })
  return { status: res.status, body: await res.text() }
}

const SERVER = `import http.server, sys
v = sys.argv[1].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(v)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[2])), H).serve_forever()
`

// prepare starts, in sbx, a server that holds value in memory only (its
// script is deleted once it runs), a counting loop, and files in /tmp and
// the home directory.
async function prepare(sbx, value, port) {
  await sbx.files.write('/tmp/server.py', SERVER)
  await sbx.commands.run(`python3 /tmp/server.py ${value} ${port}`, { background: true })
  await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true })
  await waitUntil(async () => (await portFetch(sbx.sandboxId, port)).body === value, 'the server to answer')
  await sbx.commands.run('rm /tmp/server.py')
  await sbx.files.write('/tmp/kept.txt', 'in tmp')
  await sbx.files.write('/home/user/kept.txt', 'in home')
}

// checkHeld checks what prepare left in sbx.
async function checkHeld(sbx, value, port) {
  assert.deepEqual(await portFetch(sbx.sandboxId, port), { status: 200, body: value })
  assert.equal(await sbx.files.read('/tmp/kept.txt'), 'in tmp')
  assert.equal(await sbx.files.read('/home/user/kept.txt'), 'in home')
  const count = async () => Number((await sbx.commands.run('cat /tmp/count')).stdout)
  const first = await count()
  await waitUntil(async () => (await count()) > first, 'the counting loop to count on')
}

if (PHASE === 'before') {
  let sbx
  await step('create and prepare a sandbox', async () => {
    sbx = await Sandbox.create({ timeoutMs: 600_000 })
    created.push(sbx)
    await prepare(sbx, 'mem-1234', 8080)
  })
  await step('pause', async () => {
    assert.equal(await sbx.pause(), true)
    assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'a second pause says it was paused already')
  })
  await step('getInfo and list show it paused', async () => {
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId && s.state === 'paused'))
  })
  await step('a paused sandbox answers no command', async () => {
    await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 10_000 }))
  })
  writeFileSync(STATE, JSON.stringify({ paused: sbx.sandboxId }))
} else {
  const state = JSON.parse(readFileSync(STATE, 'utf8'))
  let sbx
  await step('connect resumes the paused sandbox after the restart', async () => {
    sbx = await Sandbox.connect(state.paused)
    created.push(sbx)
    assert.equal((await sbx.getInfo()).state, 'running')
  })
  await step('its server, processes and files are as they were', async () => {
    await checkHeld(sbx, 'mem-1234', 8080)
  })
  await step('pause and connect again', async () => {
    await sbx.pause()
    const again = await Sandbox.connect(sbx.sandboxId)
    await checkHeld(again, 'mem-1234', 8080)
  })

  await step("onTimeout 'pause' pauses; autoResume wakes it on the next request", async () => {
    const s = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    created.push(s)
    const info = await s.getInfo()
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
    await s.files.write('/tmp/mark', 'before the pause')
    await waitUntil(async () => (await Sandbox.getInfo(s.sandboxId)).state === 'paused', 'the sandbox to pause at its timeout')
    assert.equal(await s.files.read('/tmp/mark'), 'before the pause')
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'running')
  })
  await step("onTimeout 'pause' without autoResume stays paused until connect", async () => {
    const s = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause' } })
    created.push(s)
    await waitUntil(async () => (await Sandbox.getInfo(s.sandboxId)).state === 'paused', 'the sandbox to pause at its timeout')
    await assert.rejects(s.commands.run('true', { requestTimeoutMs: 10_000 }))
    const again = await Sandbox.connect(s.sandboxId)
    assert.equal((await again.commands.run('echo back')).stdout, 'back\n')
  })

  let snap
  await step('a snapshot starts two sandboxes with its memory and files', async () => {
    snap = await sbx.createSnapshot({ name: `pause-e2e-${process.pid}` })
    assert.ok(snap.snapshotId)
    assert.deepEqual(snap.names, [`pause-e2e-${process.pid}`])
    await sbx.files.write('/tmp/after-snapshot.txt', 'later')
    for (const ref of [snap.snapshotId, snap.names[0]]) {
      const s = await Sandbox.create(ref)
      created.push(s)
      assert.notEqual(s.sandboxId, sbx.sandboxId)
      await checkHeld(s, 'mem-1234', 8080)
      assert.equal(await s.files.exists('/tmp/after-snapshot.txt'), false)
    }
  })
  await step('listSnapshots pages through the snapshots', async () => {
    const paginator = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 })
    const seen = []
    while (paginator.hasNext) seen.push(...(await paginator.nextItems()))
    assert.ok(seen.some((s) => s.snapshotId === snap.snapshotId))
  })
  await step('fork of 3 reports 3 sandboxes', async () => {
    const results = await sbx.fork({ count: 3, timeoutMs: 120_000 })
    assert.equal(results.length, 3)
    const ids = new Set()
    for (const s of results) {
      assert.ok(s instanceof Sandbox, `a fork failed: ${s}`)
      created.push(s)
      ids.add(s.sandboxId)
      assert.equal(await s.files.read('/tmp/after-snapshot.txt'), 'later')
      assert.equal((await s.commands.run('echo forked')).stdout, 'forked\n')
    }
    assert.equal(ids.size, 3)
    assert.ok(!ids.has(sbx.sandboxId))
  })
  await step('deleteSnapshot removes it', async () => {
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    await assert.rejects(Sandbox.create(snap.snapshotId))
  })
  await step('a pause without memory keeps the files and boots anew', async () => {
    const s = await Sandbox.create({ timeoutMs: 120_000 })
    created.push(s)
    await prepare(s, 'files-only', 8081)
    assert.equal(await s.pause({ keepMemory: false }), true)
    const again = await Sandbox.connect(s.sandboxId)
    assert.equal(await again.files.read('/tmp/kept.txt'), 'in tmp')
    assert.equal(await again.files.read('/home/user/kept.txt'), 'in home')
    assert.notEqual((await portFetch(s.sandboxId, 8081)).body, 'files-only', 'the server of before the pause still answers')
    // Paused with its memory, a connect with onResume 'reboot' boots it anew too.
    await again.commands.run('sleep 3600', { background: true })
    await again.pause()
    const rebooted = await Sandbox.connect(s.sandboxId, { onResume: 'reboot' })
    assert.equal(await rebooted.files.read('/tmp/kept.txt'), 'in tmp')
    assert.equal((await rebooted.commands.run('pgrep -x sleep || echo none')).stdout, 'none\n')
  })
  await step('kill everything', async () => {
    await Promise.all(created.map((s) => s.kill()))
  })
}
