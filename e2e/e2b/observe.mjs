// observe.mjs checks, with the published e2b JS SDK against a real `tupper
// serve`, the metrics of the running sandbox that e2e/observe_test.go made
// (its id in OBSERVE_SANDBOX) and filled (OBSERVE_DISK_MIB of files):
//
//   OBSERVE_SANDBOX=<id> OBSERVE_DISK_MIB=20 node observe.mjs e2b@2.51.0
//
// Each step prints "ok   <step>"; the first failure "FAIL <step>: …".

import assert from 'node:assert/strict'
import process from 'node:process'

import { step } from './steps.mjs'

const moduleName = (process.argv[2] ?? 'e2b@2.51.0').replace(/^e2b@/, 'e2b-')
const { Sandbox, SandboxNotFoundError } = await import(moduleName)
const id = process.env.OBSERVE_SANDBOX
const diskMiB = Number(process.env.OBSERVE_DISK_MIB)
const MiB = 1 << 20

console.log(`observe: ${moduleName} against ${process.env.E2B_API_URL}, sandbox ${id}`)

let s, info, diskSizeMB
await step('connect and getInfo', async () => {
  s = await Sandbox.connect(id)
  info = await s.getInfo()
  assert.equal(info.state, 'running')
  // getInfo leaves out the disk's size that its answer carries.
  const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${id}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  assert.equal(res.status, 200)
  diskSizeMB = (await res.json()).diskSizeMB
  assert.ok(diskSizeMB > 0, `diskSizeMB ${diskSizeMB}`)
})

// checkSample checks what a sample says against getInfo.
function checkSample(m, what) {
  assert.ok(m.timestamp instanceof Date && !Number.isNaN(m.timestamp.getTime()), `${what}: timestamp ${m.timestamp}`)
  assert.equal(m.cpuCount, info.cpuCount, `${what}: cpuCount against getInfo's`)
  assert.equal(m.memTotal, info.memoryMB * MiB, `${what}: memTotal against getInfo's memoryMB`)
  assert.equal(m.diskTotal, diskSizeMB * MiB, `${what}: diskTotal against the sandbox's diskSizeMB`)
  assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `${what}: cpuUsedPct ${m.cpuUsedPct}`)
  assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal, `${what}: memUsed ${m.memUsed} of ${m.memTotal}`)
  assert.ok(m.diskUsed >= diskMiB * MiB && m.diskUsed < m.diskTotal, `${what}: diskUsed ${m.diskUsed}, after ${diskMiB} MiB written, of ${m.diskTotal}`)
  assert.equal(typeof m.memCache, 'number', `${what}: memCache`)
}

let series
await step('getMetrics gives a series, every sample with getInfo\'s sizes', async () => {
  // The daemon samples every 5 s, and samples afresh for a call that
  // would have nothing newer: two samples come within a period or two.
  const deadline = Date.now() + 60_000
  for (;;) {
    series = await s.getMetrics()
    if (series.length >= 2) break
    assert.ok(Date.now() < deadline, `only ${series.length} samples after a minute`)
    await new Promise((r) => setTimeout(r, 1000))
  }
  series.forEach((m, i) => checkSample(m, `sample ${i}`))
  for (let i = 1; i < series.length; i++) {
    assert.ok(series[i].timestamp > series[i - 1].timestamp, `sample ${i} is not newer than the one before`)
  }
})

await step('the static getMetrics and a window', async () => {
  const all = await Sandbox.getMetrics(id)
  assert.ok(all.length >= series.length, `${all.length} samples, fewer than the ${series.length} before`)
  all.forEach((m, i) => checkSample(m, `static sample ${i}`))
  const from = series[1].timestamp
  const later = await s.getMetrics({ start: new Date(from.getTime() + 1000) })
  for (const m of later) {
    // The window is in whole seconds, as the SDK rounds it.
    assert.ok(Math.floor(m.timestamp.getTime() / 1000) >= Math.round(from.getTime() / 1000 + 1), `sample at ${m.timestamp.toISOString()} before the window's start`)
  }
  const old = await s.getMetrics({ start: new Date(1000), end: new Date(2000) })
  assert.deepEqual(old, [], 'a window that ended long ago')
})

await step('getMetrics of an unknown sandbox is SandboxNotFoundError', async () => {
  const err = await Sandbox.getMetrics('nosuchsandbox0000000').then(() => null, (e) => e)
  assert.ok(err instanceof SandboxNotFoundError, `got ${err?.name}: ${err?.message}`)
})
