// The dashboard of `tupper serve`: a shell with a header, routes by the
// URL's fragment (#/, #/sandboxes/ID/TAB, #/templates) and sign-in.

import '@xterm/xterm/css/xterm.css'
import './style.css'

import { clearKey, currentKey, errorText, isUnauthorized, setKey, whoami } from './api'
import type { Ctx, Page } from './app'
import { h, replace } from './dom'
import { imagesPage } from './images'
import { hasLinkToken, loginPage, redeemLink, takeLinkToken } from './login'
import { sandboxPage } from './sandbox'
import { sandboxesPage } from './sandboxes'

const root = document.getElementById('app')!
let page: Page | null = null
let pageKey = ''
let banner: HTMLElement | null = null
let content: HTMLElement | null = null
let bannerTimer: number | undefined

const ctx: Ctx = {
  fail(err) {
    if (isUnauthorized(err)) {
      signOut('Your key was refused or your session ended: sign in again.')
      return
    }
    console.error(err)
    show(errorText(err), 'error')
  },
  notice(message) {
    show(message, 'notice')
  },
}

function show(message: string, kind: string): void {
  if (!banner) return
  banner.className = `banner ${kind}`
  banner.textContent = message
  window.clearTimeout(bannerTimer)
  bannerTimer = window.setTimeout(() => {
    if (banner) banner.className = 'banner hidden'
  }, kind === 'error' ? 10_000 : 4_000)
}

function closePage(): void {
  page?.close()
  page = null
  pageKey = ''
}

// endSession ends the dashboard session whose key is key; an API key is
// not the dashboard's to end, and the daemon leaves it be.
function endSession(key: string): void {
  void fetch('session', { method: 'DELETE', headers: { 'X-API-Key': key } }).catch(() => {})
}

function signOut(message = ''): void {
  const key = currentKey()
  clearKey()
  closePage()
  content = banner = null
  if (key) endSession(key)
  loginPage(root, message, () => {
    location.hash = '#/'
    shell()
    route()
  })
}

function shell(): void {
  const nav = h('nav', null,
    h('a', { href: '#/', 'data-nav': 'sandboxes' }, 'Sandboxes'),
    h('a', { href: '#/templates', 'data-nav': 'templates' }, 'Templates & images'))
  banner = h('div', { class: 'banner hidden', role: 'status' })
  content = h('main', { id: 'content' })
  const team = h('span', { class: 'team', id: 'team', title: 'the team this tab acts for' })
  replace(root,
    h('header', null,
      h('a', { class: 'brand', href: '#/' }, 'Tupper'),
      nav,
      team,
      h('button', { class: 'link', type: 'button', id: 'sign-out', onclick: () => signOut('Signed out.') }, 'Sign out')),
    banner,
    content)
  whoami().then((w) => { team.textContent = `team ${w.team}` }, (err) => ctx.fail(err))
}

// adoptLink makes the session a sign-in link gave this tab's credential.
// A tab signed in already as another team asks first: a link anyone sent
// must not switch it silently. The credential given up, or the session
// declined, is ended.
async function adoptLink(token: string): Promise<void> {
  const next = await redeemLink(token)
  const previous = currentKey()
  if (previous) {
    let current: string | null = null
    try {
      current = (await whoami(previous)).team
    } catch (err) {
      if (!isUnauthorized(err)) throw err // a refused credential is nothing to keep
    }
    if (current !== null && current !== next.team &&
      !window.confirm(`This sign-in link signs this tab in as team "${next.team}"; it acts for team "${current}" now. Switch to team "${next.team}"?`)) {
      endSession(next.key)
      return
    }
    endSession(previous)
  }
  setKey(next.key)
}

function route(): void {
  if (!currentKey() || !content) return
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent)
  let key: string
  let make: () => Page
  if (parts[0] === 'sandboxes' && parts[1]) {
    key = `sandbox:${parts[1]}`
    const el = content
    make = () => sandboxPage(el, ctx, parts[1], parts.slice(2))
  } else if (parts[0] === 'templates') {
    key = 'templates'
    const el = content
    make = () => imagesPage(el, ctx)
  } else {
    key = 'sandboxes'
    const el = content
    make = () => sandboxesPage(el, ctx)
  }
  for (const a of root.querySelectorAll<HTMLAnchorElement>('nav a')) {
    a.classList.toggle('active', a.dataset.nav === (key === 'templates' ? 'templates' : 'sandboxes'))
  }
  if (key === pageKey && page) {
    // The same page: another of its tabs, or nothing new.
    page.update?.(parts.slice(2))
    return
  }
  closePage()
  replace(content)
  pageKey = key
  page = make()
}

async function start(): Promise<void> {
  const token = takeLinkToken()
  if (token) {
    try {
      await adoptLink(token)
    } catch (err) {
      signOut(errorText(err))
      return
    }
  }
  if (!currentKey()) {
    signOut()
    return
  }
  shell()
  route()
}

window.addEventListener('hashchange', () => {
  // A sign-in link may be opened in a tab that is open already.
  if (hasLinkToken()) void start()
  else route()
})
void start()
