// bench.mjs is `tupper bench`'s JS SDK path: it times, through the published
// e2b JS SDK, what a user's code does with a running sandbox of a Tupper
// daemon. tupper runs it with node:
//
//   node bench.mjs /path/to/node_modules/e2b/dist/index.mjs
//
// with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set, BENCH_SANDBOX the
// sandbox to connect to, BENCH_RUNS the runs of each figure and
// BENCH_SIZES the transfer sizes in bytes, comma-separated. It prints one
// line per run:
//
//   bench {"op":"command","ms":12.3}
//   bench {"op":"write","bytes":1048576,"ms":45.6}
//
// and "FAIL <what>" with a non-zero exit on an error.

import { randomFillSync } from 'node:crypto'
import process from 'node:process'
import { pathToFileURL } from 'node:url'

const { Sandbox } = await import(pathToFileURL(process.argv[2]).href)
const runs = Number(process.env.BENCH_RUNS ?? 3)
const sizes = (process.env.BENCH_SIZES ?? '1048576').split(',').map(Number)
const path = '/tmp/tupper-bench-js.bin'
const opts = { requestTimeoutMs: 600_000 }

function report(fields, start) {
  const ms = performance.now() - start
  console.log(`bench ${JSON.stringify({ ...fields, ms: Math.round(ms * 1000) / 1000 })}`)
}

try {
  const s = await Sandbox.connect(process.env.BENCH_SANDBOX, opts)
  for (let i = 0; i < runs; i++) {
    const start = performance.now()
    const r = await s.commands.run('true', opts)
    report({ op: 'command' }, start)
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  }
  for (const size of sizes) {
    // Random bytes: nothing on the way can make them smaller.
    const data = randomFillSync(new Uint8Array(size))
    for (let i = 0; i < runs; i++) {
      let start = performance.now()
      await s.files.write(path, data, opts)
      report({ op: 'write', bytes: size }, start)
      start = performance.now()
      const got = await s.files.read(path, { ...opts, format: 'bytes' })
      report({ op: 'read', bytes: size }, start)
      if (got.length !== size) throw new Error(`read ${got.length} bytes of ${size}`)
    }
  }
  await s.files.remove(path, opts).catch(() => {})
} catch (err) {
  console.log(`FAIL ${err?.stack ?? err}`)
  process.exitCode = 1
}
