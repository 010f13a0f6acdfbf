// The processes the sandbox's agent runs (commands.list), live.

import type { ProcessInfo } from 'e2b'

import { errorText } from './api'
import { every } from './app'
import { confirmButton, h, replace, text } from './dom'
import type { Tab } from './sandbox'

export const processesTab: Tab = (el, ctx, sbx) => {
  const body = h('tbody')
  const status = h('p', { class: 'empty' }, 'Loading…')
  replace(el,
    h('p', { class: 'hint' }, 'The commands and terminals started through the agent (SDKs, the CLI, this dashboard), with their children left out.'),
    h('table', { class: 'list', id: 'processes' },
      h('thead', null, h('tr', null,
        h('th', { class: 'num' }, 'PID'), h('th', null, 'Command'), h('th', null, 'Directory'), h('th', null, 'Tag'), h('th'))),
      body),
    status)
  const row = (p: ProcessInfo) => h('tr', { 'data-pid': p.pid },
    h('td', { class: 'num' }, p.pid),
    h('td', { class: 'mono' }, [p.cmd, ...p.args].join(' ')),
    h('td', { class: 'mono' }, p.cwd ?? ''),
    h('td', null, p.tag ?? ''),
    h('td', { class: 'actions' }, confirmButton('Kill', 'Confirm kill', async () => {
      try {
        await (await sbx.connect()).commands.kill(p.pid)
        await refresh()
      } catch (err) {
        ctx.fail(err)
      }
    })))
  const refresh = async () => {
    try {
      const list = await (await sbx.connect()).commands.list()
      list.sort((a, b) => a.pid - b.pid)
      replace(body, ...list.map(row))
      text(status, list.length ? '' : 'No processes.')
    } catch (err) {
      text(status, `cannot list processes: ${errorText(err)}`)
    }
  }
  return every(3000, refresh)
}
