// The sandbox's network: the egress policy it runs under, and what that
// policy refused lately (GET /sandboxes/{id}/network/denials).

import { api, errorText } from './api'
import { every } from './app'
import { h, replace, text } from './dom'
import { clock } from './format'
import type { Tab } from './sandbox'

interface Denial {
  time: string
  kind: string
  protocol?: string
  destination: string
  host?: string
  rule: string
}

function list(items: string[] | undefined): Node {
  return items?.length ? h('ul', { class: 'plain mono' }, ...items.map((i) => h('li', null, i))) : h('span', { class: 'muted' }, 'none')
}

export const networkTab: Tab = (el, ctx, sbx) => {
  const policy = h('dl', { class: 'facts' })
  const body = h('tbody')
  const status = h('p', { class: 'empty' })
  replace(el,
    h('h3', null, 'Egress policy'), policy,
    h('h3', null, 'Recent denials'),
    h('table', { class: 'list', id: 'denials' },
      h('thead', null, h('tr', null,
        h('th', null, 'Time'), h('th', null, 'Kind'), h('th', null, 'Destination'), h('th', null, 'Host'), h('th', null, 'Rule'))),
      body),
    status)
  const refresh = async () => {
    const info = sbx.info()
    const net = info?.network
    const rules = Object.entries(net?.rules ?? {})
    replace(policy,
      h('dt', null, 'Internet'), h('dd', null, info?.allowInternetAccess === false ? 'denied' : 'allowed unless denied below'),
      h('dt', null, 'Allowed out'), h('dd', null, list(net?.allowOut)),
      h('dt', null, 'Denied out'), h('dd', null, list(net?.denyOut)),
      rules.length ? h('dt', null, 'Rules') : null,
      rules.length ? h('dd', null, list(rules.map(([host, r]) => `${host}: ${JSON.stringify(r)}`))) : null)
    try {
      const res = await api<{ denials: Denial[] }>('GET', `/sandboxes/${encodeURIComponent(sbx.id)}/network/denials`)
      const denials = [...res.denials].reverse()
      replace(body, ...denials.map((d) => h('tr', null,
        h('td', null, clock(new Date(d.time))),
        h('td', null, d.protocol ? `${d.kind} (${d.protocol})` : d.kind),
        h('td', { class: 'mono' }, d.destination),
        h('td', { class: 'mono' }, d.host ?? ''),
        h('td', null, d.rule))))
      text(status, denials.length ? '' : 'Nothing was denied lately.')
    } catch (err) {
      text(status, `cannot read the denials: ${errorText(err)}`)
      ctx.fail(err)
    }
  }
  return every(3000, refresh)
}
