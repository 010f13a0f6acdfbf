// template_parity.mjs builds, with the published e2b JS SDK, the template
// that e2e/template_sdk_test.go has just built with the Go SDK, from the
// same context directory, against the same `tupper serve`:
//
//   BASE_IMAGE=… CONTEXT_DIR=… TEMPLATE_NAME=… RUN_ID=… node template_parity.mjs e2b@2.51.0
//
// The Go SDK hashes COPY files and serializes steps as this SDK does, so
// the server has both uploads already and every step comes from the
// cache.

import assert from 'node:assert/strict'
import process from 'node:process'

import { setStepTimeout, step } from './steps.mjs'

const arg = process.argv[2]
const { BASE_IMAGE, CONTEXT_DIR, TEMPLATE_NAME, RUN_ID } = process.env
if (!arg || !BASE_IMAGE || !CONTEXT_DIR || !TEMPLATE_NAME || !RUN_ID) {
  console.error('usage: BASE_IMAGE=… CONTEXT_DIR=… TEMPLATE_NAME=… RUN_ID=… node template_parity.mjs e2b@VERSION')
  process.exit(2)
}
const { Template, waitForURL } = await import(arg.replace(/^e2b@/, 'e2b-'))

setStepTimeout(300_000)

await step("the Go SDK's template, built again, uploads nothing and runs no step", async () => {
  const t = Template({ fileContextPath: CONTEXT_DIR })
    .fromImage(BASE_IMAGE)
    .runCmd(`echo built > /opt/marker && rm -f /etc/motd # run ${RUN_ID}`, { user: 'root' })
    .copy('app', '/srv/app')
    .copy('config.txt', '/etc/tupper-test/', { user: 'root', mode: 0o640 })
    .setEnvs({ GREETING: 'hello from the template' })
    .setWorkdir('/srv/app')
    .runCmd('python3 main.py > ran.txt && whoami > who.txt')
    .setStartCmd('python3 -m http.server 8000 --directory /srv/app', waitForURL('http://localhost:8000/ran.txt', 200))
  const logs = []
  await Template.build(t, TEMPLATE_NAME, { onBuildLogs: (e) => logs.push(String(e.message ?? e)) })
  const all = logs.join('\n')
  assert.ok(all.includes("Skipping upload of 'app', already cached"), all)
  assert.ok(all.includes("Skipping upload of 'config.txt', already cached"), all)
  assert.equal(logs.filter((l) => l.startsWith('CACHED ')).length, 6, all)
})
