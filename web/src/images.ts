// Templates (built through the template API) and images (what sandboxes
// boot from), with their sizes.

import { errorText } from './api'
import { every, type Ctx, type Page } from './app'
import { listImages, listTemplates } from './catalog'
import { h, replace, text } from './dom'
import { bytes, dateTime } from './format'

export function imagesPage(el: HTMLElement, _ctx: Ctx): Page {
  const templates = h('tbody')
  const images = h('tbody')
  const tStatus = h('p', { class: 'empty' }, 'Loading…')
  const iStatus = h('p', { class: 'empty' }, 'Loading…')
  replace(el,
    h('div', { class: 'page-head' }, h('h2', null, 'Templates')),
    h('table', { class: 'list', id: 'templates' },
      h('thead', null, h('tr', null,
        h('th', null, 'Name'), h('th', null, 'ID'), h('th', null, 'Build'), h('th', { class: 'num' }, 'CPU'),
        h('th', { class: 'num' }, 'Memory'), h('th', null, 'Updated'))),
      templates),
    tStatus,
    h('div', { class: 'page-head' }, h('h2', null, 'Images')),
    h('table', { class: 'list', id: 'images' },
      h('thead', null, h('tr', null,
        h('th', null, 'Names'), h('th', null, 'ID'), h('th', { class: 'num' }, 'Size'), h('th', null, 'Created'))),
      images),
    iStatus)
  const refresh = async () => {
    const [t, i] = await Promise.allSettled([listTemplates(), listImages()])
    if (t.status === 'fulfilled') {
      replace(templates, ...t.value.map((tp) => h('tr', null,
        h('td', null, (tp.names ?? tp.aliases ?? []).join(', ') || '–'),
        h('td', { class: 'mono' }, tp.templateID),
        h('td', null, `${tp.buildStatus} (${tp.buildCount})`),
        h('td', { class: 'num' }, tp.cpuCount),
        h('td', { class: 'num' }, `${tp.memoryMB} MiB`),
        h('td', null, dateTime(tp.updatedAt)))))
      text(tStatus, t.value.length ? '' : 'No templates built through the template API yet; images below start sandboxes by name.')
    } else {
      text(tStatus, `cannot list templates: ${errorText(t.reason)}`)
    }
    if (i.status === 'fulfilled') {
      replace(images, ...i.value.map((img) => h('tr', null,
        h('td', { class: 'mono' }, img.names.join(', ') || '<none>', img.shared ? null : h('span', { class: 'chip' }, 'team')),
        h('td', { class: 'mono' }, img.id.replace(/^sha256:/, '').slice(0, 12)),
        h('td', { class: 'num' }, bytes(img.size)),
        h('td', null, dateTime(img.created)))))
      text(iStatus, i.value.length ? '' : 'No images.')
    } else {
      text(iStatus, `cannot list images: ${errorText(i.reason)}`)
    }
  }
  return { close: every(10_000, refresh) }
}
