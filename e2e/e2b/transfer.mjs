// transfer.mjs measures file transfers through the published e2b JS SDK
// against a real `tupper serve`, as a user's code makes them (driven by
// e2e/transfer_bench_test.go):
//
//   node transfer.mjs e2b@2.51.0
//
// It writes TRANSFER_MIB MiB (default 64) of random bytes with
// files.write(path, bytes) and reads them back with
// files.read(path, {format: 'bytes'}), TRANSFER_ROUNDS times (default 3),
// checking every read against what was written. With TRANSFER_SANDBOX set it
// uses that running sandbox (Sandbox.connect) instead of creating one, so
// that the Go SDK's figures can come from the same sandbox.
//
// With TRANSFER_FLOOR_URL set (a server that discards what is posted and
// answers a GET with as many bytes), each round also moves the same bytes
// with node's own fetch, the way the SDK does (a multipart FormData POST,
// a GET read as an ArrayBuffer): what node alone costs, with no sandbox.
//
// Each round prints one line per transfer, which the benchmark parses:
//
//   transfer {"op":"write","bytes":67108864,"ms":1234.5}
//
// A failure prints "FAIL <what>: …" and exits non-zero.

import assert from 'node:assert/strict'
import { createHash, randomFillSync } from 'node:crypto'
import process from 'node:process'

const moduleName = (process.argv[2] ?? 'e2b@2.51.0').replace(/^e2b@/, 'e2b-')
const { Sandbox } = await import(moduleName)

const mib = Number(process.env.TRANSFER_MIB ?? 64)
const rounds = Number(process.env.TRANSFER_ROUNDS ?? 3)
const path = process.env.TRANSFER_PATH ?? '/home/user/transfer.bin'
// A loaded machine may move 64 MiB slowly: bound the calls generously.
const opts = { requestTimeoutMs: 600_000 }

function report(op, bytes, start) {
  const ms = performance.now() - start
  console.log(`transfer ${JSON.stringify({ op, bytes, ms: Math.round(ms * 10) / 10 })}`)
}

function sha256(b) {
  return createHash('sha256').update(b).digest('hex')
}

let s
let created = false
try {
  if (process.env.TRANSFER_SANDBOX) {
    s = await Sandbox.connect(process.env.TRANSFER_SANDBOX)
  } else {
    s = await Sandbox.create({ timeoutMs: 600_000 })
    created = true
  }
  // Random bytes: nothing on the way can make them smaller.
  const data = randomFillSync(new Uint8Array(mib << 20))
  const want = sha256(data)
  for (let i = 0; i < rounds; i++) {
    let start = performance.now()
    const info = await s.files.write(path, data, opts)
    report('write', data.length, start)
    assert.equal(info.path, path)

    start = performance.now()
    const got = await s.files.read(path, { ...opts, format: 'bytes' })
    report('read', got.length, start)
    assert.equal(got.length, data.length, 'read length')
    assert.equal(sha256(got), want, 'read content')

    const floor = process.env.TRANSFER_FLOOR_URL
    if (floor) {
      start = performance.now()
      const form = new FormData()
      form.append('file', new Blob([data]), path)
      const res = await fetch(floor, { method: 'POST', body: form })
      await res.arrayBuffer()
      assert.equal(res.status, 200, 'floor write')
      report('floor-write', data.length, start)

      start = performance.now()
      const back = await (await fetch(floor)).arrayBuffer()
      report('floor-read', back.byteLength, start)
      assert.equal(back.byteLength, data.length, 'floor read length')
    }
  }
} catch (err) {
  console.log(`FAIL transfer: ${err?.stack ?? err}`)
  process.exitCode = 1
} finally {
  if (created) await s?.kill().catch(() => {})
}
