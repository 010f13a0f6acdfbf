// template.mjs builds a template through the published e2b JS SDK's
// Template API against a real `tupper serve`, and starts sandboxes from it:
//
//   BASE_IMAGE=tupper-test/debian:… node template.mjs e2b@2.51.0
//
// run by e2e/template_test.go. The template is built from a local image
// with runCmd, copy, env, workdir and a start command whose ready check is
// waitForPort; a sandbox of it sees every step's result with its server
// answering at once; the same build again takes every step from the
// cache; a failing step fails the build naming it.

import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import process from 'node:process'

import { onFailure, setStepTimeout, step } from './steps.mjs'

const arg = process.argv[2]
const { BASE_IMAGE, E2B_API_URL } = process.env
if (!arg || !BASE_IMAGE) {
  console.error('usage: BASE_IMAGE=image node template.mjs e2b@VERSION')
  process.exit(2)
}
const { Sandbox, Template, waitForPort, BuildError } = await import(arg.replace(/^e2b@/, 'e2b-'))

setStepTimeout(300_000)
const created = []
onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

// The build's context: the files its copy steps send.
const context = mkdtempSync(join(tmpdir(), 'tupper-template-'))
mkdirSync(join(context, 'app', 'lib'), { recursive: true })
writeFileSync(join(context, 'app', 'main.py'), 'print("from main")\n')
writeFileSync(join(context, 'app', 'lib', 'util.py'), 'X = 42\n')
writeFileSync(join(context, 'config.txt'), 'configured\n')

const alias = `e2e-template-${process.pid}`

// The first step names this run, so that the first build runs every
// step whatever earlier runs left in the image store's cache.
const RUN_ID = `${process.pid}-${Date.now()}`
function define() {
  return Template({ fileContextPath: context })
    .fromImage(BASE_IMAGE)
    .runCmd(`echo built > /opt/marker && rm -f /etc/motd # run ${RUN_ID}`, { user: 'root' })
    .copy('app', '/srv/app')
    .copy('config.txt', '/etc/tupper-test/', { user: 'root' })
    .copy('config.txt', '/etc/')
    .setEnvs({ GREETING: 'hello from the template' })
    .setWorkdir('/srv/app')
    .runCmd('python3 main.py > ran.txt')
    .setStartCmd('python3 -m http.server 8000 --directory /srv/app', waitForPort(8000))
}

async function portFetch(sandboxId, port, path = '/') {
  const res = await fetch(`${E2B_API_URL}${path}`, { headers: { 'E2b-Sandbox-Id': sandboxId, 'E2b-Sandbox-Port': String(port) } })
  return { status: res.status, body: await res.text() }
}

let first
await step('Template.build runs every step and names the result', async () => {
  const logs = []
  const t0 = Date.now()
  first = await Template.build(define(), alias, { onBuildLogs: (e) => logs.push(String(e.message ?? e)) })
  first.ms = Date.now() - t0
  assert.equal(first.name, alias)
  assert.ok(first.templateId && first.buildId)
  assert.ok(logs.some((l) => l.startsWith('[1/7]')), `the first step did not run: ${logs.join('\n')}`)
  assert.ok(!logs.some((l) => l.includes('CACHED')), `a step came from the cache: ${logs.join('\n')}`)
  assert.ok(await Template.exists(alias))
})

await step("a sandbox of it sees every step's result, its server ready", async () => {
  const sbx = await Sandbox.create(alias)
  created.push(sbx)
  assert.equal((await sbx.commands.run('cat /opt/marker')).stdout, 'built\n')
  assert.equal((await sbx.commands.run('test -e /etc/motd && echo there || echo gone')).stdout, 'gone\n')
  assert.equal(await sbx.files.read('/srv/app/main.py'), 'print("from main")\n')
  assert.equal(await sbx.files.read('/srv/app/lib/util.py'), 'X = 42\n')
  assert.equal(await sbx.files.read('/etc/tupper-test/config.txt'), 'configured\n')
  // A COPY into an existing directory gives its user the copied file
  // only, not the directory or what else is in it.
  assert.equal((await sbx.commands.run('stat -c %U /etc /etc/passwd /etc/config.txt')).stdout, 'root\nroot\nuser\n')
  assert.equal(await sbx.files.read('/srv/app/ran.txt'), 'from main\n')
  assert.equal((await sbx.commands.run('echo "$GREETING"; pwd')).stdout, 'hello from the template\n/srv/app\n')
  // Ready when create returns: the server answers at once.
  const res = await portFetch(sbx.sandboxId, 8000, '/ran.txt')
  assert.deepEqual(res, { status: 200, body: 'from main\n' })
  // By its template id too.
  const byId = await Sandbox.create(first.templateId)
  created.push(byId)
  assert.equal((await byId.commands.run('cat /opt/marker')).stdout, 'built\n')
})

await step('the same build again takes every step from the cache', async () => {
  const logs = []
  const t0 = Date.now()
  const again = await Template.build(define(), alias, { onBuildLogs: (e) => logs.push(String(e.message ?? e)) })
  const ms = Date.now() - t0
  assert.notEqual(again.buildId, first.buildId)
  const cached = logs.filter((l) => l.includes('CACHED'))
  assert.equal(cached.length, 7, `want 7 cached steps, log:\n${logs.join('\n')}`)
  console.log(`     first build ${first.ms} ms, cached build ${ms} ms`)
})

await step('a failing step fails the build, naming the step', async () => {
  const bad = Template({ fileContextPath: context }).fromImage(BASE_IMAGE).runCmd('echo about to fail; exit 3')
  await assert.rejects(Template.build(bad, `${alias}-bad`), (err) => {
    assert.ok(err instanceof BuildError, `got ${err}`)
    assert.match(err.message, /exit code 3/)
    return true
  })
})

await step('list and delete', async () => {
  const res = await fetch(`${E2B_API_URL}/templates`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
  const list = await res.json()
  assert.ok(list.some((t) => t.templateID === first.templateId && t.aliases.includes(alias)))
  await Promise.all(created.map((s) => s.kill()))
  const del = await fetch(`${E2B_API_URL}/templates/${alias}`, { method: 'DELETE', headers: { 'X-API-Key': process.env.E2B_API_KEY } })
  assert.equal(del.status, 204)
  assert.equal(await Template.exists(alias), false)
  await assert.rejects(Sandbox.create(alias))
})
