// ratelimit.mjs drives a real `tupper serve` whose admission control is
// tight (e2e/admission_test.go starts it with --max-creating 2
// --max-queued 4) with the published e2b JS SDK: a burst of BURST creates
// (12 unless set) beyond it is refused with 429 and Retry-After, which the
// SDK reports as a RateLimitError when told not to retry.
//
//   E2B_API_URL=… E2B_SANDBOX_URL=… E2B_API_KEY=… [BURST=12] node ratelimit.mjs e2b@2.51.0
//
// Each step prints "ok   <step>"; the first failure prints "FAIL <step>: …"
// and exits with status 1. e2e/admission_test.go runs it.

import assert from 'node:assert/strict'
import process from 'node:process'

import { onFailure, step } from './steps.mjs'

const arg = process.argv[2]
if (!arg) {
  console.error('usage: node ratelimit.mjs e2b@VERSION')
  process.exit(2)
}
const moduleName = arg.replace(/^e2b@/, 'e2b-')
const { Sandbox, RateLimitError } = await import(moduleName)
const made = []

onFailure(() => Promise.allSettled(made.map((s) => s.kill())))

const BURST = Number(process.env.BURST ?? 12)

await step(`a burst of ${BURST} creates without retries: created, or RateLimitError`, async () => {
  const results = await Promise.allSettled(Array.from({ length: BURST }, () => Sandbox.create({ retries: 0 })))
  let limited = 0
  for (const r of results) {
    if (r.status === 'fulfilled') {
      made.push(r.value)
      continue
    }
    assert.ok(r.reason instanceof RateLimitError, `want RateLimitError, got ${r.reason?.stack ?? r.reason}`)
    limited++
  }
  assert.ok(limited > 0, `none of ${BURST} creates was refused`)
  assert.ok(made.length > 0, 'no create succeeded')
})

await step('the sandboxes made in the burst work', async () => {
  for (const s of made) assert.equal((await s.commands.run('echo ok')).stdout, 'ok\n')
})

await step('kill them', async () => {
  for (const s of made.splice(0)) assert.equal(await s.kill(), true)
})

console.log(`PASS ${moduleName}`)
