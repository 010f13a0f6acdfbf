// One sandbox: its particulars, and tabs for a terminal, its files, its
// processes, its logs and its network.

import { Sandbox, type SandboxInfo } from 'e2b'

import { extendButton, killButton } from './actions'
import { sdkOptions } from './api'
import { every, type Ctx, type Page } from './app'
import { h, replace, text } from './dom'
import { filesTab } from './files'
import { dateTime, duration } from './format'
import { logsTab } from './logs'
import { networkTab } from './network'
import { processesTab } from './processes'
import { terminalTab } from './terminal'

// Tab is what a tab shows: open fills el, and returns how to close it.
export type Tab = (el: HTMLElement, ctx: Ctx, sbx: SandboxHandle) => () => void

// SandboxHandle is how a tab reaches the sandbox: its id, its latest
// particulars, and a data-plane connection made on first use.
export interface SandboxHandle {
  id: string
  info(): SandboxInfo | undefined
  connect(): Promise<Sandbox>
}

const tabs: Record<string, [string, Tab]> = {
  terminal: ['Terminal', terminalTab],
  files: ['Files', filesTab],
  processes: ['Processes', processesTab],
  logs: ['Logs', logsTab],
  network: ['Network', networkTab],
}

export function sandboxPage(el: HTMLElement, ctx: Ctx, id: string, parts: string[]): Page {
  let info: SandboxInfo | undefined
  let conn: Promise<Sandbox> | null = null
  const handle: SandboxHandle = {
    id,
    info: () => info,
    connect() {
      // Only a running sandbox is connected to: connecting resumes a
      // paused one, which looking at it must not do.
      if (info?.state !== 'running') return Promise.reject(new Error(`sandbox ${id} is ${info?.state ?? 'not known yet'}`))
      conn ??= Sandbox.connect(id, sdkOptions()).catch((err) => {
        conn = null
        throw err
      })
      return conn
    },
  }

  const state = h('span', { class: 'badge' })
  const left = h('dd', { 'data-field': 'left' })
  const facts = h('dl', { class: 'facts inline' })
  const tabBar = h('nav', { class: 'tabs' })
  const tabBody = h('section', { class: 'tab-body' })
  const resume = h('button', {
    type: 'button', class: 'hidden',
    onclick: async () => {
      try {
        await Sandbox.connect(id, sdkOptions())
        await refresh()
      } catch (err) {
        ctx.fail(err)
      }
    },
  }, 'Resume')
  replace(el,
    h('div', { class: 'page-head' },
      h('a', { href: '#/', class: 'back' }, '← Sandboxes'),
      h('h2', { class: 'mono' }, id, ' ', state),
      h('div', { class: 'actions' },
        resume,
        extendButton(ctx, () => info, () => refresh()),
        killButton(ctx, id, () => {
          location.hash = '#/'
        }))),
    facts, tabBar, tabBody)

  let gone = false
  const refresh = async () => {
    if (gone) return
    try {
      info = await Sandbox.getInfo(id, sdkOptions())
    } catch (err) {
      if (err instanceof Error && (err.name === 'SandboxNotFoundError' || err.name === 'NotFoundError')) {
        gone = true
        closeTab()
        replace(tabBody, h('p', { class: 'empty' }, 'This sandbox is gone: it was killed or its time ran out.'))
        text(state, 'gone')
        state.className = 'badge gone'
        return
      }
      ctx.fail(err)
      return
    }
    text(state, info.state)
    state.className = `badge ${info.state}`
    resume.classList.toggle('hidden', info.state !== 'paused')
    const md = Object.entries(info.metadata ?? {})
    const fact = (name: string, value: Node | string) => h('div', null, h('dt', null, name), typeof value === 'string' ? h('dd', null, value) : value)
    replace(facts,
      fact('Template', info.name || info.templateId),
      fact('Started', dateTime(info.startedAt)),
      fact('Time left', left),
      fact('Size', `${info.cpuCount} CPU, ${info.memoryMB} MiB`),
      fact('Agent', `envd ${info.envdVersion}`),
      md.length ? fact('Metadata', h('dd', null, ...md.map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`)))) : null)
    tick()
    if (!current && !gone) showTab(wanted)
  }
  const tick = () => {
    if (info) text(left, info.state === 'paused' ? 'paused' : duration(new Date(info.endAt).getTime() - Date.now()))
  }

  let wanted = tabs[parts[0]] ? parts[0] : 'terminal'
  let current = ''
  let closeCurrent = () => {}
  const closeTab = () => {
    closeCurrent()
    closeCurrent = () => {}
    current = ''
  }
  const showTab = (name: string) => {
    wanted = name
    for (const a of tabBar.querySelectorAll<HTMLAnchorElement>('a')) a.classList.toggle('active', a.dataset.tab === name)
    if (!info || gone || current === name) return
    closeTab()
    replace(tabBody)
    current = name
    closeCurrent = tabs[name][1](tabBody, ctx, handle)
  }
  replace(tabBar, ...Object.entries(tabs).map(([name, [label]]) =>
    h('a', { href: `#/sandboxes/${encodeURIComponent(id)}/${name}`, 'data-tab': name }, label)))
  showTab(wanted)

  const stop = every(3000, refresh)
  const clock = window.setInterval(tick, 1000)
  return {
    close() {
      stop()
      window.clearInterval(clock)
      closeTab()
    },
    update(next) {
      showTab(tabs[next[0]] ? next[0] : 'terminal')
    },
  }
}
