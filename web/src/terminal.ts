// A terminal in the browser: a PTY in the sandbox (the e2b SDK's
// sandbox.pty, through the data plane) drawn by xterm.js.

import { FitAddon } from '@xterm/addon-fit'
import { Terminal } from '@xterm/xterm'

import { errorText } from './api'
import { h, replace } from './dom'
import type { Tab } from './sandbox'

export const terminalTab: Tab = (el, ctx, sbx) => {
  const status = h('span', { class: 'term-status' }, 'connecting…')
  const screen = h('div', { class: 'terminal', 'data-terminal-state': 'connecting' })
  replace(el, h('div', { class: 'term-bar' }, status), screen)

  const term = new Terminal({
    cursorBlink: true,
    fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace',
    fontSize: 13,
    scrollback: 5000,
    theme: { background: '#0f172a', foreground: '#e2e8f0', cursor: '#facc15' },
  })
  const fit = new FitAddon()
  term.loadAddon(fit)
  term.open(screen)
  fit.fit()

  let closed = false
  let pid: number | undefined
  // Input and resizes go out in order, one at a time; what is typed
  // before the PTY exists waits for it.
  let outbox: Promise<unknown> = Promise.resolve()
  const send = (fn: (pid: number) => Promise<unknown>) => {
    outbox = outbox.then(async () => {
      if (pid === undefined || closed) return
      try {
        await fn(pid)
      } catch (err) {
        if (!closed) ctx.fail(err)
      }
    })
  }
  const encoder = new TextEncoder()
  const setState = (s: string, label: string) => {
    screen.dataset.terminalState = s
    status.textContent = label
  }

  const started = (async () => {
    const sandbox = await sbx.connect()
    const handle = await sandbox.pty.create({
      cols: term.cols,
      rows: term.rows,
      // The PTY lives as long as the tab shows it, not a minute.
      timeoutMs: 0,
      onData: (data) => term.write(data),
    })
    if (closed) {
      await sandbox.pty.kill(handle.pid)
      return
    }
    pid = handle.pid
    setState('ready', `shell, pid ${pid}`)
    term.focus()
    handle.wait().then(
      () => setState('exited', 'the shell exited'),
      (err) => { if (!closed) setState('exited', `the shell ended: ${errorText(err)}`) })
    return sandbox
  })()
  started.catch((err) => setState('failed', `no terminal: ${errorText(err)}`))
  outbox = started.catch(() => {})

  const input = term.onData((data) => send(async (p) => (await started)?.pty.sendInput(p, encoder.encode(data))))
  const resized = term.onResize(({ cols, rows }) => send(async (p) => (await started)?.pty.resize(p, { cols, rows })))
  const observer = new ResizeObserver(() => fit.fit())
  observer.observe(screen)

  return () => {
    closed = true
    observer.disconnect()
    input.dispose()
    resized.dispose()
    term.dispose()
    if (pid !== undefined) {
      const p = pid
      started.then((s) => s?.pty.kill(p)).catch(() => {})
    }
  }
}
