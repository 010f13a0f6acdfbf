// limits.mjs drives a real `tupper serve` with the published e2b JS SDK to
// check that a sandbox holds its limits the way a VM's kernel would
// (docs/design/limits.md): a process past the memory limit is killed
// alone, and the SDK reports it as a CommandExitError with exit code 137;
// the sandbox, its files and its other processes live on.
//
//   node limits.mjs e2b@2.51.0
//
// Each step prints "ok   <step>"; the first failure "FAIL <step>: …".

import assert from 'node:assert/strict'
import process from 'node:process'

import { onFailure, step } from './steps.mjs'

const moduleName = (process.argv[2] ?? 'e2b@2.51.0').replace(/^e2b@/, 'e2b-')
const { Sandbox, CommandExitError } = await import(moduleName)
let sbx

onFailure(() => sbx?.kill())

// The loop that used to end whole sandboxes: 256 MiB at a time, kept.
const bomb = `python3 -c '
bufs = []
while True:
    bufs.append(bytearray(256 << 20))
    print(len(bufs) * 256, "MiB", flush=True)
'`

let sibling
await step('create, a file in /tmp and a background process', async () => {
  sbx = await Sandbox.create({ timeoutMs: 300_000 })
  await sbx.files.write('/tmp/work.txt', 'the user\'s work\n')
  sibling = await sbx.commands.run('sleep 600', { background: true })
  assert.ok(sibling.pid > 0)
})

await step('the memory bomb rejects with CommandExitError, exit code 137', async () => {
  const t0 = Date.now()
  let err
  try {
    await sbx.commands.run(bomb, { timeoutMs: 120_000 })
  } catch (e) {
    err = e
  }
  assert.ok(err instanceof CommandExitError, `the bomb ended with ${err?.stack ?? 'success'}`)
  assert.equal(err.exitCode, 137)
  assert.match(err.error ?? '', /out of memory/)
  assert.match(err.stdout, /256 MiB/)
  console.log(`     killed after ${Date.now() - t0} ms: ${err.error}`)
})

await step('echo alive right after', async () => {
  const r = await sbx.commands.run('echo alive')
  assert.equal(r.stdout, 'alive\n')
})

await step('the file in /tmp is intact', async () => {
  assert.equal(await sbx.files.read('/tmp/work.txt'), 'the user\'s work\n')
})

await step('the background process lives on', async () => {
  const r = await sbx.commands.run(`kill -0 ${sibling.pid} && echo running`)
  assert.equal(r.stdout, 'running\n')
  await sibling.kill()
})

await step('open files: 1024, up to 65536', async () => {
  const r = await sbx.commands.run('ulimit -n; ulimit -Hn')
  assert.equal(r.stdout, '1024\n65536\n')
})

await step('kill', async () => {
  await sbx.kill()
})
