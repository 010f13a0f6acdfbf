// codeinterpreter.mjs drives a real `tupper serve` with the published
// @e2b/code-interpreter SDK, unchanged, as its users do: Sandbox.create()
// with no template (the SDK asks for code-interpreter-v1), then runCode.
//
//   node codeinterpreter.mjs
//
// Each step prints "ok   <step>"; the first failure "FAIL <step>: …".

import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

import { onFailure, step } from './steps.mjs'

let sbx

onFailure(() => sbx?.kill())

await step('Sandbox.create() with the default template', async () => {
  sbx = await Sandbox.create({ timeoutMs: 600_000 })
  assert.ok(sbx.sandboxId)
})

await step('state lives across cells: x = 41, then x + 1 is 42', async () => {
  const first = await sbx.runCode('x = 41')
  assert.equal(first.error, undefined)
  const exec = await sbx.runCode('x + 1')
  assert.equal(exec.text, '42')
  assert.equal(exec.results.filter((r) => r.isMainResult).length, 1)
  assert.ok(exec.executionCount >= 2, `executionCount ${exec.executionCount}`)
})

await step('print streams to onStdout before the cell ends', async () => {
  // The cell waits for a file that this step writes only once it has
  // seen the first line: without streaming, it would never end.
  const gate = `/tmp/gate-${Date.now()}`
  let wrote = false
  const seen = []
  const exec = await sbx.runCode(
    `import os, time\nprint('first', flush=True)\nwhile not os.path.exists(${JSON.stringify(gate)}): time.sleep(0.05)\nprint('second')`,
    {
      onStdout: async (out) => {
        seen.push(out.line)
        if (!wrote && out.line.includes('first')) {
          wrote = true
          await sbx.files.write(gate, 'go')
        }
      },
      timeoutMs: 120_000,
    },
  )
  assert.equal(exec.error, undefined)
  assert.deepEqual(exec.logs.stdout.join('').split('\n').filter(Boolean), ['first', 'second'])
  assert.ok(seen.join('').includes('second'))
})

await step('a matplotlib plot comes back as a PNG', async () => {
  const exec = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title("a line")\nplt.show()',
    { timeoutMs: 180_000 },
  )
  assert.equal(exec.error, undefined, exec.error?.traceback)
  const png = exec.results.find((r) => r.png)?.png
  assert.ok(png, `no png among ${JSON.stringify(exec.results.map((r) => r.formats()))}`)
  const bytes = Buffer.from(png, 'base64')
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  // The IHDR chunk holds the size: a real figure, not a stub.
  assert.ok(bytes.readUInt32BE(16) > 100 && bytes.readUInt32BE(20) > 100)
  // The same figure as data.
  const chart = exec.results.find((r) => r.png).chart
  assert.equal(chart?.type, 'line')
  assert.equal(chart.title, 'a line')
  assert.deepEqual(chart.elements[0].points, [[1, 3], [2, 1], [3, 2]])
})

await step('a DataFrame comes back as HTML', async () => {
  const exec = await sbx.runCode("import pandas as pd\npd.DataFrame({'name': ['a', 'b'], 'n': [1, 2]})")
  assert.equal(exec.error, undefined, exec.error?.traceback)
  const main = exec.results.find((r) => r.isMainResult)
  assert.match(main.html, /<table/)
  assert.ok(main.formats().includes('html'))
})

await step('an exception comes back with its name, value and traceback', async () => {
  const errors = []
  const exec = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()', { onError: (e) => errors.push(e) })
  assert.equal(exec.error.name, 'ValueError')
  assert.equal(exec.error.value, 'bad value')
  assert.match(exec.error.traceback, /f\(\)/)
  assert.equal(errors.length, 1)
})

await step('env vars for one cell', async () => {
  const exec = await sbx.runCode("import os\nos.environ.get('GREETING')", { envs: { GREETING: 'hello' } })
  assert.equal(exec.text, "'hello'")
  const after = await sbx.runCode("os.environ.get('GREETING', 'gone')")
  assert.equal(after.text, "'gone'")
})

await step('a JavaScript context and a bash run', async () => {
  const js = await sbx.createCodeContext({ language: 'js' })
  assert.equal(js.language, 'javascript')
  await sbx.runCode('const xs = [1, 2, 3]', { context: js })
  const exec = await sbx.runCode('console.log("sum"); xs.reduce((a, b) => a + b, 0) * 7', { context: js })
  assert.equal(exec.text, '42')
  assert.deepEqual(exec.logs.stdout, ['sum\n'])
  const ts = await sbx.runCode('const n: number = 6; n * 7', { language: 'ts' })
  assert.equal(ts.text, '42')
  const sh = await sbx.runCode('cd /tmp && echo "$((6 * 7)) in $(pwd)"', { language: 'bash' })
  assert.equal(sh.logs.stdout.join(''), '42 in /tmp\n')
})

await step('create, list, restart and remove contexts', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  assert.equal(ctx.cwd, '/tmp')
  const cwd = await sbx.runCode('import os\nkept = 1\nos.getcwd()', { context: ctx })
  assert.equal(cwd.text, "'/tmp'")
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id))
  assert.ok(listed.some((c) => c.language === 'python' && c.id !== ctx.id), 'the default python context is listed')
  await sbx.restartCodeContext(ctx)
  const lost = await sbx.runCode('kept', { context: ctx })
  assert.equal(lost.error?.name, 'NameError')
  await sbx.removeCodeContext(ctx.id)
  await assert.rejects(sbx.runCode('1', { context: ctx }), (err) => err.name === 'NotFoundError')
})

await step('a cell past its timeout is interrupted and the context still works', async () => {
  await sbx.runCode('survivor = 99')
  await assert.rejects(
    sbx.runCode('import time\nwhile True: time.sleep(0.1)', { timeoutMs: 3_000 }),
    (err) => /timeout|timed out|abort/i.test(`${err.name} ${err.message}`),
  )
  const exec = await sbx.runCode('survivor')
  assert.equal(exec.text, '99')
})

await step('context and language together are refused', async () => {
  const ctx = await sbx.createCodeContext()
  await assert.rejects(sbx.runCode('1', { context: ctx, language: 'python' }), /not both/)
})

await step('kill', async () => {
  await sbx.kill()
  sbx = undefined
})
