// What the list and a sandbox's page both do to a sandbox.

import { Sandbox, type SandboxInfo } from 'e2b'

import { sdkOptions } from './api'
import type { Ctx } from './app'
import { confirmButton, h } from './dom'

// extendBy is what "+5 min" adds to a sandbox's time left.
const extendBy = 5 * 60_000

// extendButton gives the sandbox that info names extendBy more than it
// has left, then runs done.
export function extendButton(ctx: Ctx, info: () => SandboxInfo | undefined, done: () => unknown): HTMLButtonElement {
  return h('button', {
    type: 'button', class: 'extend', title: 'Add 5 minutes to the time left',
    onclick: async () => {
      const i = info()
      if (!i) return
      try {
        const left = Math.max(0, new Date(i.endAt).getTime() - Date.now())
        await Sandbox.setTimeout(i.sandboxId, left + extendBy, sdkOptions())
        await done()
      } catch (err) {
        ctx.fail(err)
      }
    },
  }, '+5 min')
}

// killButton kills sandbox id on its confirming second click, then runs
// done.
export function killButton(ctx: Ctx, id: string, done: () => unknown): HTMLButtonElement {
  return confirmButton('Kill', 'Confirm kill', async () => {
    try {
      await Sandbox.kill(id, sdkOptions())
      await done()
    } catch (err) {
      ctx.fail(err)
    }
  })
}
