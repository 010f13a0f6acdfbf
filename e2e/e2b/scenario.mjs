// scenario.mjs drives a real `tupper serve` with the published e2b JS SDK,
// unchanged, through nothing but the three environment variables of
// shared/specs/e2b-wire.md:
//
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT \
//   E2B_API_KEY=e2b_… node scenario.mjs e2b@2.51.0
//
// The argument names the SDK version: "e2b@2.51.0" loads the package
// aliased as "e2b-2.51.0" in package.json (a bare alias works too). Each
// step prints "ok   <step>"; the first failure prints "FAIL <step>: …" and
// exits with status 1. e2e/e2b_test.go runs it for every pinned version.

import assert from 'node:assert/strict'
import process from 'node:process'

import { onFailure, passedSteps, setStepTimeout, step } from './steps.mjs'

const arg = process.argv[2]
if (!arg) {
  console.error('usage: node scenario.mjs e2b@VERSION')
  process.exit(2)
}
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) {
    console.error(`${v} is not set`)
    process.exit(2)
  }
}
const moduleName = arg.replace(/^e2b@/, 'e2b-')
const sdk = await import(moduleName)
const {
  Sandbox,
  CommandExitError,
  FileNotFoundError,
  SandboxNotFoundError,
  FileType,
  FilesystemEventType,
} = sdk

// RUN tags this run's sandboxes, so that listings see only them even when
// other runs share the daemon.
const RUN = `${moduleName}-${process.pid}-${Date.now()}`
const started = Date.now()
const created = []
setStepTimeout(90_000)
onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

// waitUntil polls cond (which may be async) until it holds.
async function waitUntil(cond, what, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

// create creates a sandbox and remembers it for the cleanup.
async function create(opts) {
  const s = await Sandbox.create(opts)
  created.push(s)
  return s
}

process.on('unhandledRejection', (err) => {
  console.log(`FAIL unhandled rejection: ${err?.stack ?? err}`)
  process.exit(1)
})

const enc = (s) => new TextEncoder().encode(s)
const isExitError = (code) => (err) => {
  assert.ok(err instanceof CommandExitError, `want CommandExitError, got ${err?.stack ?? err}`)
  if (code !== undefined) assert.equal(err.exitCode, code)
  else assert.notEqual(err.exitCode, 0)
  return true
}
const isA = (cls) => (err) => {
  assert.ok(err instanceof cls, `want ${cls.name}, got ${err?.stack ?? err}`)
  return true
}

console.log(`scenario: ${moduleName} against ${process.env.E2B_API_URL} (run ${RUN})`)

// ---------------------------------------------------------------- create
let plain, sbx
const metadata = { run: RUN, role: 'main', odd: 'a b&c=d/é%41' }

await step('Sandbox.create() from the default template', async () => {
  plain = await create()
  assert.match(plain.sandboxId, /^[a-z0-9][a-z0-9-]*$/)
  assert.equal(await plain.isRunning(), true)
  assert.equal((await plain.commands.run('echo hi')).stdout, 'hi\n')
})

await step('Sandbox.create() with metadata, envs and timeout', async () => {
  sbx = await create({ metadata, envs: { GREETING: 'hello from envs' }, timeoutMs: 120_000 })
  const info = await sbx.getInfo()
  assert.deepEqual(info.metadata, metadata)
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 100_000 && left <= 125_000, `sandbox ends in ${left} ms, want about 120 s`)
})

// -------------------------------------------------------------- commands
await step('commands.run as the default user, with the sandbox envs', async () => {
  const r = await sbx.commands.run('echo "$GREETING|$(whoami)|$PWD"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello from envs|user|/home/user\n')
  assert.equal(r.stderr, '')
})

await step('commands.run with envs, cwd and user root', async () => {
  const r = await sbx.commands.run('echo "$GREETING|$EXTRA|$(whoami)|$PWD"; echo to-stderr >&2', {
    envs: { EXTRA: 'x y', GREETING: 'overridden' },
    cwd: '/tmp',
    user: 'root',
  })
  assert.equal(r.stdout, 'overridden|x y|root|/tmp\n')
  assert.equal(r.stderr, 'to-stderr\n')
})

await step('a failing command raises CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo out; echo err >&2; exit 3'), (err) => {
    isExitError(3)(err)
    assert.equal(err.stdout, 'out\n')
    assert.equal(err.stderr, 'err\n')
    return true
  })
})

await step('commands.run 40 times in a row: no stream is cut short', async () => {
  for (let i = 0; i < 40; i++) {
    const r = await sbx.commands.run(`echo run-${i}`)
    assert.equal(r.stdout, `run-${i}\n`)
  }
})

// ------------------------------------------------------------ filesystem
const dir = '/home/user/e2e'

await step('files.makeDir', async () => {
  assert.equal(await sbx.files.makeDir(`${dir}/sub/deeper`), true)
  assert.equal(await sbx.files.makeDir(`${dir}/sub`), false, 'makeDir of an existing directory')
})

await step('files.write and files.read', async () => {
  const w = await sbx.files.write(`${dir}/a.txt`, 'hello files\n')
  assert.equal(w.path, `${dir}/a.txt`)
  assert.equal(w.name, 'a.txt')
  assert.equal(await sbx.files.read(`${dir}/a.txt`), 'hello files\n')

  const bytes = new Uint8Array([0, 1, 2, 127, 128, 250, 255])
  await sbx.files.write(`${dir}/bin.dat`, bytes.buffer)
  assert.deepEqual(new Uint8Array(await sbx.files.read(`${dir}/bin.dat`, { format: 'bytes' })), bytes)

  // A relative path resolves against the user's home, and the file
  // belongs to the user.
  await sbx.files.write('rel.txt', 'relative')
  assert.equal((await sbx.commands.run('cat /home/user/rel.txt; stat -c " %U" /home/user/rel.txt')).stdout, 'relative user\n')

  const many = await sbx.files.write([
    { path: `${dir}/m1.txt`, data: 'one' },
    { path: `${dir}/sub/m2.txt`, data: 'two' },
  ])
  assert.deepEqual(many.map((i) => i.path).sort(), [`${dir}/m1.txt`, `${dir}/sub/m2.txt`])
  assert.equal(await sbx.files.read(`${dir}/sub/m2.txt`), 'two')

  await assert.rejects(sbx.files.read(`${dir}/missing.txt`), isA(FileNotFoundError))
})

await step('files.list', async () => {
  const entries = await sbx.files.list(dir)
  assert.deepEqual(entries.map((e) => e.name).sort(), ['a.txt', 'bin.dat', 'm1.txt', 'sub'])
  const a = entries.find((e) => e.name === 'a.txt')
  assert.equal(a.type, FileType.FILE)
  assert.equal(a.path, `${dir}/a.txt`)
  assert.equal(a.size, 12)
  assert.equal(entries.find((e) => e.name === 'sub').type, FileType.DIR)

  const deep = await sbx.files.list(dir, { depth: 2 })
  assert.ok(deep.some((e) => e.path === `${dir}/sub/m2.txt`), 'depth 2 lists sub/m2.txt')
  assert.ok(deep.some((e) => e.path === `${dir}/sub/deeper`), 'depth 2 lists sub/deeper')
})

await step('files.exists', async () => {
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
  assert.equal(await sbx.files.exists(dir), true)
  assert.equal(await sbx.files.exists(`${dir}/nope`), false)
})

await step('files.getInfo', async () => {
  const info = await sbx.files.getInfo(`${dir}/a.txt`)
  assert.equal(info.name, 'a.txt')
  assert.equal(info.type, FileType.FILE)
  assert.equal(info.path, `${dir}/a.txt`)
  assert.equal(info.size, 12)
  assert.equal(info.owner, 'user')
  assert.match(info.permissions, /^-rw/)
  assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 120_000, `modifiedTime ${info.modifiedTime}`)
  assert.equal((await sbx.files.getInfo(dir)).type, FileType.DIR)
  await assert.rejects(sbx.files.getInfo(`${dir}/nope`), isA(FileNotFoundError))
})

await step('files.rename', async () => {
  const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/renamed.txt`)
  assert.equal(moved.path, `${dir}/renamed.txt`)
  assert.equal(moved.name, 'renamed.txt')
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
  assert.equal(await sbx.files.read(`${dir}/renamed.txt`), 'hello files\n')
})

await step('files.remove', async () => {
  await sbx.files.remove(`${dir}/renamed.txt`)
  assert.equal(await sbx.files.exists(`${dir}/renamed.txt`), false)
  await sbx.files.remove(`${dir}/sub`)
  assert.equal(await sbx.files.exists(`${dir}/sub/m2.txt`), false)
  assert.equal(await sbx.files.exists(`${dir}/sub`), false)
})

// --------------------------------------------------------- signed URLs
await step('uploadUrl and downloadUrl with fetch', async () => {
  const path = `${dir}/up.txt`
  const content = 'uploaded through a signed URL\n'
  const up = await sbx.uploadUrl(path)
  assert.match(up, /[?&]signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob([content]), path)
  const res = await fetch(up, { method: 'POST', body: form })
  assert.equal(res.status, 200, `upload: ${res.status} ${await res.clone().text()}`)
  assert.equal(await sbx.files.read(path), content)

  const down = await sbx.downloadUrl(path, { useSignatureExpiration: 120 })
  assert.match(down, /[?&]signature_expiration=\d+/)
  const got = await fetch(down)
  assert.equal(got.status, 200, `download: ${got.status}`)
  assert.equal(await got.text(), content)

  // A forged signature and a read signature used to write are refused.
  const forged = new URL(down)
  forged.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
  const f = await fetch(forged)
  assert.equal(f.status, 401, `forged signature: ${f.status}`)
  await f.body?.cancel()
  const w = await fetch(down, { method: 'POST', body: form })
  assert.equal(w.status, 401, `read signature used for a write: ${w.status}`)
  await w.body?.cancel()
})

// ------------------------------------------------ background commands
await step('background command: onStdout, sendStdin, list, connect, kill', async () => {
  let out = ''
  const h = await sbx.commands.run('echo ready; while read line; do echo "got:$line"; done', {
    background: true,
    stdin: true,
    timeoutMs: 0,
    onStdout: (d) => {
      out += d
    },
  })
  assert.ok(h.pid > 0, `pid ${h.pid}`)
  await waitUntil(() => out.includes('ready\n'), 'the first line of the background command')
  await h.sendStdin('ping\n')
  await waitUntil(() => out.includes('got:ping\n'), 'the echo of stdin')

  const procs = await sbx.commands.list()
  const p = procs.find((p) => p.pid === h.pid)
  assert.ok(p, `commands.list ${JSON.stringify(procs)} lacks pid ${h.pid}`)
  assert.equal(p.cmd, '/bin/bash')
  assert.deepEqual(p.args.slice(0, 2), ['-l', '-c'])

  let out2 = ''
  const h2 = await sbx.commands.connect(h.pid, {
    timeoutMs: 0,
    onStdout: (d) => {
      out2 += d
    },
  })
  assert.equal(h2.pid, h.pid)
  await sbx.commands.sendStdin(h.pid, 'pong\n')
  await waitUntil(() => out2.includes('got:pong\n'), 'output on the connected handle')
  await waitUntil(() => out.includes('got:pong\n'), 'output on the first handle')

  assert.equal(await h.kill(), true)
  await assert.rejects(h.wait(), isExitError())
  await assert.rejects(h2.wait(), isExitError())
  await waitUntil(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 'the killed command to leave the list')
  assert.equal(await sbx.commands.kill(h.pid), false, 'killing a gone pid')
})

await step('closeStdin ends a command reading stdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await h.sendStdin('first\n')
  await sbx.commands.sendStdin(h.pid, 'second\n')
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'first\nsecond\n')
})

// --------------------------------------------------------------- PTY
await step('pty: create, sendInput, resize, kill', async () => {
  let out = ''
  const dec = new TextDecoder()
  const term = await sbx.pty.create({
    cols: 80,
    rows: 24,
    timeoutMs: 0,
    onData: (d) => {
      out += dec.decode(d, { stream: true })
    },
  })
  assert.ok(term.pid > 0)
  await sbx.pty.sendInput(term.pid, enc('echo "[$((6*7))]"; stty size\n'))
  await waitUntil(() => out.includes('[42]') && out.includes('24 80'), `PTY output, so far ${JSON.stringify(out)}`)
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(term.pid, enc('stty size\n'))
  await waitUntil(() => out.includes('30 100'), `the new size, so far ${JSON.stringify(out)}`)
  assert.equal(await sbx.pty.kill(term.pid), true)
  await assert.rejects(term.wait(), isExitError())
})

// ------------------------------------------------------------- watch
await step('files.watchDir: create, write and remove events', async () => {
  const wdir = '/home/user/watched'
  await sbx.files.makeDir(wdir)
  const events = []
  const w = await sbx.files.watchDir(wdir, (e) => {
    events.push(e)
  }, { timeoutMs: 0 })
  const seen = (name, type) => () => events.some((e) => e.name === name && e.type === type)
  await sbx.files.write(`${wdir}/f.txt`, 'one')
  await waitUntil(seen('f.txt', FilesystemEventType.CREATE), `a create event, got ${JSON.stringify(events)}`)
  await sbx.commands.run(`echo two >> ${wdir}/f.txt`)
  await waitUntil(seen('f.txt', FilesystemEventType.WRITE), `a write event, got ${JSON.stringify(events)}`)
  await sbx.files.remove(`${wdir}/f.txt`)
  await waitUntil(seen('f.txt', FilesystemEventType.REMOVE), `a remove event, got ${JSON.stringify(events)}`)
  await w.stop()
})

// --------------------------------------------------------- lifecycle
await step('Sandbox.connect to a running sandbox', async () => {
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal((await again.commands.run('echo "$GREETING"')).stdout, 'hello from envs\n')
})

await step('isRunning, setTimeout and getInfo', async () => {
  assert.equal(await sbx.isRunning(), true)
  await sbx.setTimeout(600_000)
  let info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, metadata)
  assert.ok(info.startedAt instanceof Date && info.startedAt <= new Date())
  assert.ok(info.cpuCount >= 1, `cpuCount ${info.cpuCount}`)
  assert.ok(info.memoryMB > 0, `memoryMB ${info.memoryMB}`)
  assert.match(info.envdVersion, /^\d+\.\d+\.\d+/)
  let left = info.endAt.getTime() - Date.now()
  assert.ok(left > 590_000 && left <= 605_000, `after setTimeout(600 s) the sandbox ends in ${left} ms`)
  // Shorter works too.
  await sbx.setTimeout(180_000)
  info = await sbx.getInfo()
  left = info.endAt.getTime() - Date.now()
  assert.ok(left > 170_000 && left <= 185_000, `after setTimeout(180 s) the sandbox ends in ${left} ms`)
})

await step('Sandbox.list with a metadata filter, paginated', async () => {
  const extra = await Promise.all(
    [1, 2].map((i) => create({ metadata: { run: RUN, role: `extra${i}` } })),
  )
  const want = [sbx, ...extra].map((s) => s.sandboxId).sort()

  const pager = Sandbox.list({ query: { metadata: { run: RUN } }, limit: 2 })
  const pages = []
  while (pager.hasNext) {
    pages.push(await pager.nextItems())
    assert.ok(pages.length <= 5, 'the paginator does not end')
  }
  assert.ok(pages.every((p) => p.length <= 2), `page sizes ${pages.map((p) => p.length)} exceed the limit 2`)
  assert.ok(pages.filter((p) => p.length > 0).length >= 2, `page sizes ${pages.map((p) => p.length)}: want 2 pages or more`)
  assert.deepEqual(pages.flat().map((s) => s.sandboxId).sort(), want)
  const listed = pages.flat().find((s) => s.sandboxId === sbx.sandboxId)
  assert.deepEqual(listed.metadata, metadata)
  assert.equal(listed.state, 'running')

  const one = await Sandbox.list({ query: { metadata: { run: RUN, odd: metadata.odd } } }).nextItems()
  assert.deepEqual(one.map((s) => s.sandboxId), [sbx.sandboxId], 'filter by a value with special characters')
  const running = await Sandbox.list({ query: { metadata: { run: RUN, role: 'extra2' }, state: ['running'] } }).nextItems()
  assert.deepEqual(running.map((s) => s.sandboxId), [extra[1].sandboxId], 'filter by two keys and a state')
  const none = await Sandbox.list({ query: { metadata: { run: RUN, role: 'nobody' } } }).nextItems()
  assert.deepEqual(none, [])

  for (const s of extra) assert.equal(await s.kill(), true)
})

await step('kill ends the commands running in the sandbox', async () => {
  const running = await plain.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  const t0 = Date.now()
  assert.equal(await plain.kill(), true)
  await assert.rejects(running.wait(), isA(sdk.SandboxError))
  assert.ok(Date.now() - t0 < 10_000, `the command's stream ended ${Date.now() - t0} ms after the kill`)
  assert.equal(await plain.isRunning(), false)
  assert.equal(await plain.kill(), false, 'a second kill reports "not found"')
  assert.equal(await Sandbox.kill(plain.sandboxId), false)
  await assert.rejects(Sandbox.connect(plain.sandboxId), isA(SandboxNotFoundError))
  await assert.rejects(Sandbox.getInfo(plain.sandboxId), isA(SandboxNotFoundError))
  await assert.rejects(plain.commands.run('true'), isA(SandboxNotFoundError))
})

await step('a sandbox dies at its timeout, and so do its commands', async () => {
  // Timed from before the create: the 3 s run from when the server
  // starts making the sandbox, which a loaded machine may take a while
  // to hand back.
  const t0 = Date.now()
  const short = await create({ timeoutMs: 3_000, metadata: { run: RUN, role: 'short' } })
  assert.equal(await short.isRunning(), true)
  // The SDK reports a stream cut by the sandbox's death as a TimeoutError
  // ("the sandbox was killed or reached its end of life").
  await assert.rejects(short.commands.run('sleep 600', { timeoutMs: 0 }), isA(sdk.TimeoutError))
  const took = Date.now() - t0
  assert.ok(took > 2_900 && took < 15_000, `the command ended ${took} ms after the create began, want soon after the 3 s timeout`)
  // Every poll answers quickly, also the one that races the kill.
  await waitUntil(async () => !(await short.isRunning({ requestTimeoutMs: 5_000 })), 'the sandbox to time out', 20_000)
  await assert.rejects(Sandbox.connect(short.sandboxId), isA(SandboxNotFoundError))
  await assert.rejects(short.commands.run('true'), isA(SandboxNotFoundError))
  const left = await Sandbox.list({ query: { metadata: { run: RUN, role: 'short' } } }).nextItems()
  assert.deepEqual(left, [])
})

// E2B documents watching for the WRITE event that files.write causes
// (docs "Watch sandbox directory for changes"); upstream envd writes the
// file in place, so a watcher sees CREATE and then WRITE.
await step('files.watchDir sees files.write as create and write, as E2B documents', async () => {
  const wdir = '/home/user/watched-docs'
  await sbx.files.makeDir(wdir)
  const events = []
  const w = await sbx.files.watchDir(wdir, (e) => {
    events.push(e)
  }, { timeoutMs: 0 })
  const seen = (type) => () => events.some((e) => e.name === 'doc.txt' && e.type === type)
  await sbx.files.write(`${wdir}/doc.txt`, 'first')
  await waitUntil(seen(FilesystemEventType.CREATE), `a create event, got ${JSON.stringify(events)}`)
  await waitUntil(seen(FilesystemEventType.WRITE), `a write event after files.write, got ${JSON.stringify(events)}`, 5_000)
  await w.stop()
})

await step('kill the last sandbox', async () => {
  assert.equal(await sbx.kill(), true)
  const left = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
  assert.deepEqual(left, [])
})

console.log(`PASS ${moduleName}: ${passedSteps()} steps in ${((Date.now() - started) / 1000).toFixed(1)} s`)
