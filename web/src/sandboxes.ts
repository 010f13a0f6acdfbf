// The sandboxes page: every sandbox of the team, live, with its CPU and
// memory of the last minutes; create, extend, kill.

import { Sandbox, type SandboxInfo, type SandboxMetrics } from 'e2b'

import { extendButton, killButton } from './actions'
import { api, errorText, sdkOptions } from './api'
import { every, type Ctx, type Page } from './app'
import { templateNames } from './catalog'
import { h, replace, text } from './dom'
import { bytes, duration, pairs } from './format'
import { Spark } from './spark'

// metricsWindow is how far back the sparklines reach.
const metricsWindow = 10 * 60_000
// memFloor is the least top of a memory sparkline: a few MiB of noise
// must not fill it.
const memFloor = 32 << 20

// listSandboxes returns every running or paused sandbox, page by page.
export async function listSandboxes(): Promise<SandboxInfo[]> {
  const pager = Sandbox.list({ ...sdkOptions(), limit: 100, query: { state: ['running', 'paused'] } })
  const out: SandboxInfo[] = []
  while (pager.hasNext) out.push(...(await pager.nextItems()))
  return out
}

// Row is one sandbox's line of the table.
class Row {
  readonly el: HTMLTableRowElement
  info: SandboxInfo
  private state = h('span', { class: 'badge' })
  private age = h('td', { class: 'num' })
  private left = h('td', { class: 'num', 'data-col': 'left' })
  private cpu = new Spark('cpu')
  private mem = new Spark('mem')
  private cpuText = h('span', { class: 'metric' })
  private memText = h('span', { class: 'metric' })
  private meta = h('div', { class: 'chips' })

  constructor(info: SandboxInfo, ctx: Ctx, onChange: () => void) {
    this.info = info
    const id = info.sandboxId
    this.el = h('tr', { 'data-sandbox-id': id },
      h('td', null, h('a', { class: 'mono', href: `#/sandboxes/${encodeURIComponent(id)}/terminal` }, id), this.meta),
      h('td', null, info.name || info.templateId),
      h('td', null, this.state),
      this.age,
      this.left,
      h('td', { class: 'spark-cell' }, this.cpu.el, this.cpuText),
      h('td', { class: 'spark-cell' }, this.mem.el, this.memText),
      h('td', { class: 'actions' },
        extendButton(ctx, () => this.info, onChange),
        killButton(ctx, id, () => {
          this.el.classList.add('gone')
          onChange()
        })))
    this.update(info)
  }

  update(info: SandboxInfo): void {
    this.info = info
    text(this.state, info.state)
    this.state.className = `badge ${info.state}`
    replace(this.meta, ...Object.entries(info.metadata ?? {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`)))
    this.tick()
  }

  // tick redraws what the clock changes.
  tick(): void {
    const now = Date.now()
    text(this.age, duration(now - new Date(this.info.startedAt).getTime()))
    text(this.left, this.info.state === 'paused' ? '–' : duration(new Date(this.info.endAt).getTime() - now))
  }

  // history reports whether the row has its earlier samples yet.
  history = false
  private samples: Sample[] = []

  // addSamples merges samples into the row's, keeping metricsWindow's
  // worth, and redraws the sparklines.
  addSamples(list: Sample[]): void {
    const last = this.samples.at(-1)?.t ?? 0
    for (const m of list) if (m.t > last) this.samples.push(m)
    this.samples.sort((a, b) => a.t - b.t)
    const since = Date.now() - metricsWindow
    while (this.samples.length && this.samples[0].t < since) this.samples.shift()
    const newest = this.samples.at(-1)
    this.cpu.draw(this.samples.map((m) => m.cpu), 100)
    // Memory is drawn against the most the window saw, so that its
    // shape shows; the text says how much of the sandbox's it is.
    const mems = this.samples.map((m) => m.mem)
    this.mem.draw(mems, Math.max(1.25 * Math.max(0, ...mems), memFloor))
    text(this.cpuText, newest ? `${newest.cpu.toFixed(0)}%` : '')
    text(this.memText, newest ? bytes(newest.mem) : '')
    this.memText.title = newest ? `${bytes(newest.mem)} of ${bytes(newest.memTotal)}` : ''
  }
}

// Sample is one point of a sparkline.
interface Sample {
  t: number
  cpu: number
  mem: number
  memTotal: number
}

function sample(m: { timestamp: Date | string; cpuUsedPct: number; memUsed: number; memTotal: number }): Sample {
  return { t: new Date(m.timestamp).getTime(), cpu: m.cpuUsedPct, mem: m.memUsed, memTotal: m.memTotal }
}

// latestMetrics asks for the newest sample of each sandbox in one call
// per hundred (GET /sandboxes/metrics, E2B's SandboxesWithMetrics).
async function latestMetrics(ids: string[]): Promise<Map<string, Sample>> {
  const out = new Map<string, Sample>()
  for (let i = 0; i < ids.length; i += 100) {
    const chunk = ids.slice(i, i + 100).map(encodeURIComponent).join(',')
    const res = await api<{ sandboxes: Record<string, SandboxMetrics> }>('GET', `/sandboxes/metrics?sandbox_ids=${chunk}`)
    for (const [id, m] of Object.entries(res.sandboxes ?? {})) out.set(id, sample(m))
  }
  return out
}

function createForm(ctx: Ctx, onCreated: () => void): HTMLElement {
  const template = h('input', { name: 'template', list: 'template-names', placeholder: 'base', autocomplete: 'off' })
  const names = h('datalist', { id: 'template-names' })
  const timeout = h('input', { name: 'timeout', type: 'number', min: 1, value: 300 })
  const envs = h('textarea', { name: 'envs', rows: 3, placeholder: 'KEY=value, one a line' })
  const metadata = h('textarea', { name: 'metadata', rows: 3, placeholder: 'key=value, one a line' })
  const button = h('button', { type: 'submit', class: 'primary' }, 'Create')
  const form = h('form', { class: 'create' },
    h('label', null, 'Template', template, names),
    h('label', null, 'Timeout (seconds)', timeout),
    h('label', null, 'Environment', envs),
    h('label', null, 'Metadata', metadata),
    h('div', { class: 'form-actions' }, button))
  templateNames().then((list) => replace(names, ...list.map((n) => h('option', { value: n })))).catch(() => {})
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    button.disabled = true
    try {
      const sbx = await Sandbox.create(template.value.trim() || 'base', {
        ...sdkOptions(),
        timeoutMs: Number(timeout.value) * 1000,
        envs: pairs(envs.value, 'Environment'),
        metadata: pairs(metadata.value, 'Metadata'),
      })
      ctx.notice(`Created ${sbx.sandboxId}.`)
      onCreated()
    } catch (err) {
      ctx.fail(new Error(`create: ${errorText(err)}`))
    } finally {
      button.disabled = false
    }
  })
  return h('details', { class: 'card' }, h('summary', null, 'New sandbox'), form)
}

export function sandboxesPage(el: HTMLElement, ctx: Ctx): Page {
  const rows = new Map<string, Row>()
  const body = h('tbody')
  const empty = h('p', { class: 'empty' }, 'Loading…')
  const count = h('span', { class: 'count' })
  let refreshNow = () => {}
  replace(el,
    h('div', { class: 'page-head' }, h('h2', null, 'Sandboxes ', count)),
    createForm(ctx, () => refreshNow()),
    h('table', { class: 'list', id: 'sandboxes' },
      h('thead', null, h('tr', null,
        h('th', null, 'Sandbox'), h('th', null, 'Template'), h('th', null, 'State'), h('th', null, 'Age'),
        h('th', null, 'Time left'), h('th', null, 'CPU'), h('th', null, 'Memory'), h('th'))),
      body),
    empty)

  const refresh = async () => {
    try {
      const list = await listSandboxes()
      list.sort((a, b) => new Date(b.startedAt).getTime() - new Date(a.startedAt).getTime())
      const seen = new Set<string>()
      for (const info of list) {
        seen.add(info.sandboxId)
        let row = rows.get(info.sandboxId)
        if (row) row.update(info)
        else rows.set(info.sandboxId, (row = new Row(info, ctx, () => refreshNow())))
        body.appendChild(row.el)
      }
      for (const [id, row] of rows) {
        if (!seen.has(id)) {
          row.el.remove()
          rows.delete(id)
        }
      }
      text(count, `(${list.length})`)
      text(empty, list.length ? '' : 'No sandboxes. Create one above, or with an SDK: they show up here.')
      // A sandbox seen first brings its last minutes; after that one
      // call a round gives every sandbox's newest sample.
      const running = list.filter((i) => i.state === 'running').map((i) => rows.get(i.sandboxId)!)
      const start = new Date(Date.now() - metricsWindow)
      await Promise.all(running.filter((r) => !r.history).map(async (row) => {
        try {
          row.addSamples((await Sandbox.getMetrics(row.info.sandboxId, { ...sdkOptions(), start })).map(sample))
          row.history = true
        } catch {
          // Killed meanwhile: the next round drops its row.
        }
      }))
      const known = running.filter((r) => r.history)
      if (known.length) {
        const latest = await latestMetrics(known.map((r) => r.info.sandboxId))
        for (const row of known) {
          const m = latest.get(row.info.sandboxId)
          if (m) row.addSamples([m])
        }
      }
    } catch (err) {
      ctx.fail(err)
    }
  }
  const stop = every(3000, refresh)
  refreshNow = () => void refresh()
  const clock = window.setInterval(() => rows.forEach((r) => r.tick()), 1000)
  return {
    close() {
      stop()
      window.clearInterval(clock)
    },
  }
}
