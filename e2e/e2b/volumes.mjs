// volumes.mjs drives volumes of a real `tupper serve` with the published
// e2b JS SDK, unchanged, in two phases run by e2e/volumes_test.go around a
// restart of the daemon (with the volumes unmounted between, as a host's
// reboot leaves them):
//
//   PHASE=before STATE=/path/state.json node volumes.mjs e2b@2.51.0
//   (the daemon stops, the volumes are unmounted, the daemon starts)
//   PHASE=after  STATE=/path/state.json OTHER_KEY=<another team's key> node volumes.mjs e2b@2.51.0
//
// The content routes go to E2B_VOLUME_API_URL, which the test points at
// the daemon as it does E2B_API_URL.
//
// "before": Volume.create, list and getInfo; every content call (write,
// read as text and bytes, list with depth, makeDir, getInfo, exists,
// updateMetadata, remove); two sandboxes that mount the volume at once
// see each other's writes; links a sandbox plants (to /etc, to a host
// file, above the top) let no content call out of the volume; a volume of
// 32 MB fills up in a sandbox with ENOSPC and refuses an upload past it;
// a volume in use is not destroyed. "after": what the two sandboxes wrote
// is there for the SDK and for a third sandbox; another team's key sees
// none of it and cannot mount it; then both volumes are destroyed.

import assert from 'node:assert/strict'
import { readFileSync, writeFileSync } from 'node:fs'
import process from 'node:process'

import { onFailure, setStepTimeout, step } from './steps.mjs'

const arg = process.argv[2]
const { PHASE, STATE, E2B_API_URL, E2B_API_KEY, E2B_VOLUME_API_URL, OTHER_KEY } = process.env
if (!arg || !['before', 'after'].includes(PHASE) || !STATE || !E2B_VOLUME_API_URL) {
  console.error('usage: PHASE=before|after STATE=file E2B_VOLUME_API_URL=… node volumes.mjs e2b@VERSION')
  process.exit(2)
}
const { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError, VolumeFileType } = await import(arg.replace(/^e2b@/, 'e2b-'))

setStepTimeout(120_000)
const created = []
onFailure(() => Promise.allSettled(created.map((s) => s.kill())))

async function create(opts) {
  const sbx = await Sandbox.create(opts)
  created.push(sbx)
  return sbx
}

// sh runs script in sbx and returns its stdout and exit code, whatever
// the code.
async function sh(sbx, script) {
  const res = await sbx.commands.run(`${script}; echo "rc=$?"`)
  const out = res.stdout.trimEnd()
  const i = out.lastIndexOf('rc=')
  return { out: out.slice(0, i).trimEnd(), code: Number(out.slice(i + 3)) }
}

// rejects checks that promise fails with a VolumeError whose message
// holds status, and returns the error.
async function rejects(promise, status, what) {
  let err
  try {
    await promise
  } catch (e) {
    err = e
  }
  assert.ok(err, `${what}: it succeeded`)
  assert.ok(err instanceof VolumeError, `${what}: ${err?.name}: ${err?.message}`)
  assert.match(err.message, new RegExp(`^${status}\\b`), `${what}: ${err.message}`)
  return err
}

if (PHASE === 'before') {
  const state = {}
  let vol

  await step('Volume.create, list and getInfo', async () => {
    vol = await Volume.create('e2e-data')
    assert.equal(vol.name, 'e2e-data')
    assert.ok(vol.volumeId && vol.token, 'an id and a token')
    const list = await Volume.list()
    assert.ok(list.some((v) => v.volumeId === vol.volumeId && v.name === 'e2e-data'), JSON.stringify(list))
    const info = await Volume.getInfo(vol.volumeId)
    assert.equal(info.token, vol.token)
    await assert.rejects(Volume.create('e2e-data'), VolumeError, 'a second volume of the same name')
    await assert.rejects(Volume.getInfo('no-such-volume'), VolumeNotFoundError)
    state.volumeId = vol.volumeId
  })

  await step('the content routes', async () => {
    const written = await vol.writeFile('/seed/hello.txt', 'hello, volume')
    assert.equal(written.type, VolumeFileType.FILE)
    assert.equal(written.size, 13)
    assert.equal(written.path, '/seed/hello.txt')
    assert.ok(written.mtime instanceof Date && !isNaN(written.mtime), 'an mtime')
    assert.equal(await vol.readFile('/seed/hello.txt'), 'hello, volume')
    assert.deepEqual([...(await vol.readFile('/seed/hello.txt', { format: 'bytes' }))].length, 13)

    const made = await vol.makeDir('/made/deep', { force: true })
    assert.equal(made.type, VolumeFileType.DIRECTORY)
    await assert.rejects(vol.makeDir('/made/deep'), VolumeError, 'makeDir of an existing directory without force')
    await assert.rejects(vol.makeDir('/nope/child'), VolumePathNotFoundError, 'makeDir under a missing parent')

    const entries = await vol.list('/', { depth: 2 })
    assert.deepEqual(entries.map((e) => `${e.path}:${e.type}`).sort(), ['/made:directory', '/made/deep:directory', '/seed:directory', '/seed/hello.txt:file'].sort())
    assert.equal((await vol.list('/')).length, 2)

    const info = await vol.getInfo('/seed/hello.txt')
    assert.equal(info.size, 13)
    assert.equal(await vol.exists('/seed/hello.txt'), true)
    assert.equal(await vol.exists('/seed/missing.txt'), false)
    const updated = await vol.updateMetadata('/seed/hello.txt', { mode: 0o640 })
    assert.equal(updated.mode, 0o640)

    await vol.writeFile('/gone.txt', 'soon gone')
    await vol.remove('/gone.txt')
    assert.equal(await vol.exists('/gone.txt'), false)
    await assert.rejects(vol.readFile('/gone.txt'), VolumePathNotFoundError)
    await vol.remove('/made')
    assert.equal(await vol.exists('/made/deep'), false)
  })

  let a, b
  await step('two sandboxes mount the volume at once and see each other write', async () => {
    ;[a, b] = await Promise.all([
      create({ volumeMounts: { '/data': vol } }),
      create({ volumeMounts: { '/home/user/vol': 'e2e-data' } }),
    ])
    assert.equal((await sh(a, 'cat /data/seed/hello.txt')).out, 'hello, volume')
    await sh(a, 'echo from-a > /data/a.txt')
    assert.equal((await sh(b, 'cat /home/user/vol/a.txt')).out, 'from-a')
    await sh(b, 'mkdir -p /home/user/vol/b && echo from-b > /home/user/vol/b/b.txt')
    assert.equal((await sh(a, 'cat /data/b/b.txt')).out, 'from-b')
    await sh(a, 'echo from-a-again >> /data/a.txt')
    assert.equal((await sh(b, 'tail -n 1 /home/user/vol/a.txt')).out, 'from-a-again')
    assert.equal(await vol.readFile('/b/b.txt'), 'from-b\n')
    await vol.writeFile('/from-api.txt', 'from the api')
    assert.equal((await sh(b, 'cat /home/user/vol/from-api.txt')).out, 'from the api')
    state.sandboxes = [a.sandboxId, b.sandboxId]
  })

  await step('links planted by a sandbox lead no content call out of the volume', async () => {
    const plant = await sh(a, [
      'ln -s /etc /data/etc',
      'ln -s /etc/hostname /data/hostname',
      'ln -s ../../../../../../../../etc /data/up',
      'ln -s a.txt /data/good',
    ].join(' && '))
    assert.equal(plant.code, 0, plant.out)
    await rejects(vol.readFile('/etc/passwd'), 400, 'read through a link to /etc')
    await rejects(vol.readFile('/hostname'), 400, 'read through a link to a host file')
    await rejects(vol.readFile('/up/passwd'), 400, 'read through a link above the top')
    await rejects(vol.list('/etc'), 400, 'list through a link to /etc')
    await rejects(vol.writeFile('/etc/tupper-volume-e2e', 'pwned'), 400, 'write through a link to /etc')
    await rejects(vol.writeFile('/up/tupper-volume-e2e', 'pwned'), 400, 'write through a link above the top')
    await rejects(vol.makeDir('/etc/tupper-volume-e2e', { force: true }), 400, 'makeDir through a link')
    await rejects(vol.updateMetadata('/hostname', { mode: 0o777 }), 400, 'chmod of a link to a host file')
    await rejects(vol.remove('/etc/hostname'), 400, 'remove through a link to /etc')
    // A link inside the volume works; the links show as links.
    assert.equal(await vol.readFile('/good'), 'from-a\nfrom-a-again\n')
    const top = await vol.list('/')
    const link = top.find((e) => e.name === 'etc')
    assert.equal(link.type, VolumeFileType.SYMLINK)
    assert.equal(link.target, '/etc')
    // Removing a link removes the link alone.
    await vol.remove('/etc')
    await vol.remove('/up')
    await vol.remove('/hostname')
  })

  await step('a volume of 32 MB fills up: ENOSPC inside, an upload past it refused', async () => {
    const res = await fetch(`${E2B_API_URL}/volumes`, {
      method: 'POST',
      headers: { 'X-API-KEY': E2B_API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'e2e-small', sizeMB: 32 }),
    })
    assert.equal(res.status, 201, await res.clone().text())
    const small = await Volume.connect((await res.json()).volumeID)
    state.smallId = small.volumeId
    const c = await create({ volumeMounts: { '/small': small } })
    const dd = await sh(c, 'dd if=/dev/zero of=/small/fill bs=1M count=64 2>&1')
    assert.notEqual(dd.code, 0, dd.out)
    assert.match(dd.out, /No space left on device/)
    assert.equal((await sh(c, 'echo alive')).out, 'alive')
    await sh(c, 'rm /small/fill')
    await small.writeFile('/keep.txt', 'old')
    const err = await rejects(small.writeFile('/keep.txt', new Uint8Array(40 << 20)), 507, 'a 40 MiB upload')
    assert.match(err.message, /full/)
    assert.equal(await small.readFile('/keep.txt'), 'old')
    await c.kill()
  })

  await step('a volume in use is not destroyed', async () => {
    const err = await rejects(Volume.destroy(vol.volumeId), 409, 'destroy while mounted')
    assert.match(err.message, new RegExp(a.sandboxId))
    assert.equal(await vol.readFile('/seed/hello.txt'), 'hello, volume')
  })

  await step('both sandboxes are killed', async () => {
    await Promise.all([a.kill(), b.kill()])
    writeFileSync(STATE, JSON.stringify(state))
  })
} else {
  const state = JSON.parse(readFileSync(STATE, 'utf8'))
  let vol

  await step('the volume is back after the restart', async () => {
    vol = await Volume.connect(state.volumeId)
    assert.equal(vol.name, 'e2e-data')
    assert.equal(await vol.readFile('/seed/hello.txt'), 'hello, volume')
    assert.equal(await vol.readFile('/b/b.txt'), 'from-b\n')
  })

  await step('a third sandbox reads what the first two wrote', async () => {
    const c = await create({ volumeMounts: { '/mnt/v': 'e2e-data' } })
    assert.equal((await sh(c, 'cat /mnt/v/a.txt /mnt/v/b/b.txt /mnt/v/from-api.txt')).out, 'from-a\nfrom-a-again\nfrom-b\nfrom the api')
    await c.kill()
  })

  await step("another team's key sees none of it", async () => {
    if (!OTHER_KEY) throw new Error('OTHER_KEY is not set')
    const other = { apiKey: OTHER_KEY }
    await assert.rejects(Volume.getInfo(state.volumeId, other), VolumeNotFoundError)
    assert.deepEqual(await Volume.list(other), [])
    assert.equal(await Volume.destroy(state.volumeId, other), false)
    await assert.rejects(Sandbox.create({ ...other, volumeMounts: { '/data': 'e2e-data' } }), /404|not exist/)
    await assert.rejects(Sandbox.create({ ...other, volumeMounts: { '/data': state.volumeId } }), /404|not exist/)
  })

  await step('the volumes are destroyed', async () => {
    assert.equal(await Volume.destroy(state.volumeId), true)
    assert.equal(await Volume.destroy(state.smallId), true)
    assert.equal(await Volume.destroy(state.volumeId), false)
    assert.deepEqual(await Volume.list(), [])
    // Its token opens nothing any more.
    await assert.rejects(vol.readFile('/seed/hello.txt'), /Unauthorized/)
  })
}
