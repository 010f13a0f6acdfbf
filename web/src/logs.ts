// The sandbox's logs (GET /sandboxes/{id}/logs): its agent's records and
// its start command's output, followed as they come.

import { api, errorText } from './api'
import { every } from './app'
import { h, replace, text } from './dom'
import { clock } from './format'
import type { Tab } from './sandbox'

interface LogEntry {
  timestamp: string
  level: string
  message: string
  fields: Record<string, string>
}

// maxLines bounds what the page keeps.
const maxLines = 5000

export const logsTab: Tab = (el, ctx, sbx) => {
  const out = h('div', { class: 'logs mono', id: 'logs' })
  const status = h('p', { class: 'empty' }, 'Loading…')
  replace(el, out, status)
  // The query's start is inclusive: the entries of the last millisecond
  // seen come again, and are told apart by their contents.
  let cursor = 0
  let atCursor = new Set<string>()
  const refresh = async () => {
    try {
      const res = await api<{ logEntries: LogEntry[] }>('GET',
        `/sandboxes/${encodeURIComponent(sbx.id)}/logs?start=${cursor}&limit=1000`)
      const stick = out.scrollTop + out.clientHeight >= out.scrollHeight - 4
      for (const e of res.logEntries) {
        const t = new Date(e.timestamp)
        const ms = t.getTime()
        const id = `${e.level}|${e.message}|${JSON.stringify(e.fields)}`
        if (ms === cursor && atCursor.has(id)) continue
        if (ms !== cursor) {
          cursor = ms
          atCursor = new Set()
        }
        atCursor.add(id)
        const fields = Object.entries(e.fields ?? {}).map(([k, v]) => `${k}=${v}`).join(' ')
        out.appendChild(h('div', { class: `log-line ${e.level}` },
          h('span', { class: 'log-time' }, clock(t)), ' ',
          h('span', { class: 'log-level' }, e.level.toUpperCase().padEnd(5)), ' ',
          e.message,
          fields ? h('span', { class: 'log-fields' }, ` ${fields}`) : null))
      }
      while (out.childElementCount > maxLines) out.firstElementChild!.remove()
      if (stick) out.scrollTop = out.scrollHeight
      text(status, out.childElementCount ? '' : 'No log entries yet.')
    } catch (err) {
      text(status, `cannot read the logs: ${errorText(err)}`)
      ctx.fail(err)
    }
  }
  return every(2000, refresh)
}
