// Signing in: with an API key typed in, or with a one-time link that
// `tupper dashboard` printed on the daemon's host.

import { api, errorText, setKey, Unauthorized } from './api'
import { h, replace } from './dom'

// loginFragment is how a sign-in link carries its token: in the URL's
// fragment, which browsers never send to a server, so it reaches no log.
const loginFragment = /^#login=([A-Za-z0-9_-]{16,128})$/

// hasLinkToken reports whether the page's URL is a sign-in link.
export function hasLinkToken(): boolean {
  return loginFragment.test(location.hash)
}

// takeLinkToken returns the token of a sign-in link this page was opened
// with, and removes it from the address bar and the history at once.
export function takeLinkToken(): string | null {
  const m = loginFragment.exec(location.hash)
  if (!m) return null
  history.replaceState(null, '', location.pathname + location.search + '#/')
  return m[1]
}

// LinkSession is what a sign-in link was traded for: a short-lived key
// and the team it acts for.
export interface LinkSession {
  key: string
  team: string
}

// redeemLink trades a link's token for a short-lived key. The token works
// once: the daemon forgets it as it answers.
export async function redeemLink(token: string): Promise<LinkSession> {
  const res = await fetch('session', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
  })
  if (!res.ok) {
    throw new Error('this sign-in link was used already or has expired: run `tupper dashboard` again for a new one')
  }
  const { key, team } = (await res.json()) as { key: string; team: string; expiresAt: string }
  return { key, team }
}

// loginPage shows the sign-in form in root; onSignedIn runs once a key
// was accepted.
export function loginPage(root: HTMLElement, message: string, onSignedIn: () => void): void {
  const input = h('input', {
    id: 'api-key', type: 'password', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'e2b_…', required: true,
  })
  const status = h('p', { class: 'error', role: 'alert' }, message)
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in')
  const form = h('form', { class: 'login card' },
    h('h1', null, 'Tupper'),
    h('label', { for: 'api-key' }, 'API key'),
    input,
    button,
    status,
    h('p', { class: 'hint' },
      'On the daemon’s host, ', h('code', null, 'tupper dashboard'),
      ' prints a link that signs you in without a key. Keys come from ', h('code', null, 'tupper keys create'), '.'),
  )
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    const key = input.value.trim()
    button.disabled = true
    status.textContent = ''
    try {
      await api('GET', '/v2/sandboxes?limit=1', undefined, key)
      setKey(key)
      onSignedIn()
    } catch (err) {
      status.textContent = err instanceof Unauthorized ? 'The daemon refused this key.' : errorText(err)
    } finally {
      button.disabled = false
    }
  })
  replace(root, h('main', { class: 'login-page' }, form))
  input.focus()
}
