// disk.mjs drives a real `tupper serve`, started with `--disk 64M`, with the
// published e2b JS SDK to check a sandbox's disk cap as an E2B user meets
// it (driven by e2e/disk_test.go):
//
//   node disk.mjs e2b@2.51.0
//
// Each step prints "ok   <step>"; the first failure "FAIL <step>: …".

import assert from 'node:assert/strict'
import process from 'node:process'

import { onFailure, step } from './steps.mjs'

const moduleName = (process.argv[2] ?? 'e2b@2.51.0').replace(/^e2b@/, 'e2b-')
const { Sandbox, CommandExitError, NotEnoughSpaceError } = await import(moduleName)
const created = []

onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

console.log(`disk: ${moduleName} against ${process.env.E2B_API_URL}`)

let s
await step('create', async () => {
  s = await Sandbox.create({ timeoutMs: 300_000 })
  created.push(s)
})

const old = 'the old content\n'
await step('write a small file', async () => {
  await s.files.write('/home/user/data.txt', old)
})

await step('a filler gets ENOSPC at the cap', async () => {
  for (const cmd of ['dd if=/dev/zero of=/home/user/fill bs=1M count=300', 'head -c 300M /dev/zero > /tmp/fill2']) {
    const err = await s.commands.run(cmd, { timeoutMs: 60_000 }).then(() => null, (e) => e)
    assert.ok(err instanceof CommandExitError, `${cmd} under a 64 MB cap: ${err ?? 'succeeded'}`)
    assert.match(err.stderr, /No space left on device/, `${cmd}: ${err.stderr}`)
  }
  await s.commands.run('rm /home/user/fill /tmp/fill2')
})

await step('files.write of a file bigger than the disk fails with NotEnoughSpaceError', async () => {
  // 96 MiB into a 64 MiB disk. A loaded machine's uploads may be slow:
  // more time than the SDK's default, which bounds the upload, not the
  // answer.
  const big = new Uint8Array(96 << 20).fill(110)
  const err = await s.files.write('/home/user/data.txt', big.buffer, { requestTimeoutMs: 300_000 }).then(() => null, (e) => e)
  assert.ok(err instanceof NotEnoughSpaceError, `want NotEnoughSpaceError, got ${err?.name}: ${err?.message ?? 'no error'}`)
  assert.match(err.message, /disk space/)
})

await step('the old file is intact', async () => {
  assert.equal(await s.files.read('/home/user/data.txt'), old)
})

await step('the sandbox lives on', async () => {
  const r = await s.commands.run('echo alive && dd if=/dev/zero of=/tmp/again bs=1M count=32 2>/dev/null && rm /tmp/again && echo room')
  assert.equal(r.stdout, 'alive\nroom\n')
  await s.files.write('/home/user/data.txt', 'new')
  assert.equal(await s.files.read('/home/user/data.txt'), 'new')
})

await step('kill', async () => {
  await s.kill()
})
