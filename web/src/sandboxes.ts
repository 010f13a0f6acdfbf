// The sandboxes page: every sandbox of the team, live, with its CPU and
// memory of the last minutes; create, extend, kill.

import { Sandbox, type SandboxInfo, type SandboxMetrics } from 'e2b'

import { errorText, sdkOptions } from './api'
import { every, type Ctx, type Page } from './app'
import { templateNames } from './catalog'
import { confirmButton, h, replace, text } from './dom'
import { bytes, duration, pairs } from './format'
import { Spark } from './spark'

// metricsWindow is how far back the sparklines reach.
const metricsWindow = 10 * 60_000
// extendBy is what "+5 min" adds to a sandbox's time left.
const extendBy = 5 * 60_000

// listSandboxes returns every running or paused sandbox, page by page.
export async function listSandboxes(): Promise<SandboxInfo[]> {
  const pager = Sandbox.list({ ...sdkOptions(), limit: 100, query: { state: ['running', 'paused'] } })
  const out: SandboxInfo[] = []
  while (pager.hasNext) out.push(...(await pager.nextItems()))
  return out
}

// extend gives the sandbox extendBy more than it has left.
export async function extend(info: SandboxInfo): Promise<void> {
  const left = Math.max(0, new Date(info.endAt).getTime() - Date.now())
  await Sandbox.setTimeout(info.sandboxId, left + extendBy, sdkOptions())
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
        h('button', {
          type: 'button', class: 'extend', title: 'Add 5 minutes to the time left',
          onclick: async () => {
            try {
              await extend(this.info)
              onChange()
            } catch (err) {
              ctx.fail(err)
            }
          },
        }, '+5 min'),
        confirmButton('Kill', 'Confirm kill', async () => {
          try {
            await Sandbox.kill(id, sdkOptions())
            this.el.classList.add('gone')
            onChange()
          } catch (err) {
            ctx.fail(err)
          }
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

  metrics(samples: SandboxMetrics[]): void {
    const last = samples.at(-1)
    this.cpu.draw(samples.map((m) => m.cpuUsedPct), 100)
    this.mem.draw(samples.map((m) => m.memUsed), last?.memTotal || this.info.memoryMB * 1024 * 1024)
    text(this.cpuText, last ? `${last.cpuUsedPct.toFixed(0)}%` : '')
    text(this.memText, last ? bytes(last.memUsed) : '')
  }
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
      const start = new Date(Date.now() - metricsWindow)
      await Promise.all(list.filter((i) => i.state === 'running').map(async (info) => {
        try {
          rows.get(info.sandboxId)?.metrics(await Sandbox.getMetrics(info.sandboxId, { ...sdkOptions(), start }))
        } catch {
          // A sandbox killed meanwhile has no metrics: the next round
          // drops its row.
        }
      }))
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
