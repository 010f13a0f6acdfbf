// steps.mjs runs the named steps of the scripts in e2e/e2b and reports
// each the way e2e/e2b_test.go's runScript reads them: "ok   <step> (N ms)"
// when it passes; at the first failure "FAIL <step>: <error>" (and the
// error's cause on a line of its own), then the script's cleanups, then
// exit status 1. Each script is a node process of its own, so the state
// kept here belongs to one script.

import process from 'node:process'

const cleanups = []
let timeoutMs = 0
let passed = 0

// onFailure registers fn to run when a step fails, before the process
// exits: it kills the sandboxes the script holds at that moment, so that a
// failed run leaves none behind. fn may be async; its errors are ignored,
// and every registered fn runs whatever the others do.
export function onFailure(fn) {
  cleanups.push(fn)
}

// setStepTimeout makes a step that takes longer than ms milliseconds fail
// with "step timed out". 0, the default, leaves steps unbounded.
export function setStepTimeout(ms) {
  timeoutMs = ms
}

// passedSteps reports how many steps have passed so far.
export function passedSteps() {
  return passed
}

// step runs fn, which may be async, as the step called name and reports
// it; when fn fails, the process ends here.
export async function step(name, fn) {
  const t0 = Date.now()
  let timer
  try {
    const done = fn()
    if (timeoutMs > 0) {
      const ms = timeoutMs
      await Promise.race([
        done,
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`step timed out after ${ms} ms`)), ms)
        }),
      ])
    } else {
      await done
    }
  } catch (err) {
    console.log(`FAIL ${name}: ${err?.stack ?? err}`)
    if (err?.cause) console.log(`     cause: ${err.cause?.stack ?? err.cause}`)
    await Promise.allSettled(cleanups.map(async (cleanup) => cleanup()))
    process.exit(1)
  } finally {
    clearTimeout(timer)
  }
  passed++
  console.log(`ok   ${name} (${Date.now() - t0} ms)`)
}
