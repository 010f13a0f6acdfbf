// Templates (built through the template API) and images (what sandboxes
// boot from), with their sizes.

import { errorText } from './api'
import { every, type Ctx, type Page } from './app'
import { listImages, listTemplates, type ImageJSON } from './catalog'
import { h, replace, text } from './dom'
import { bytes, dateTime } from './format'

// buildCache starts the names of the images template builds cache.
const buildCache = 'tupper-build-cache/'

function imageRow(img: ImageJSON): HTMLTableRowElement {
  return h('tr', null,
    h('td', { class: 'mono' }, img.names.join(', ') || '<none>', img.shared ? null : ' ', img.shared ? null : h('span', { class: 'chip', title: 'your team’s own' }, 'team')),
    h('td', { class: 'mono' }, img.id.replace(/^sha256:/, '').slice(0, 12)),
    h('td', { class: 'num' }, bytes(img.size)),
    h('td', null, dateTime(img.created)))
}

export function imagesPage(el: HTMLElement, _ctx: Ctx): Page {
  const templates = h('tbody')
  const images = h('tbody')
  const tStatus = h('p', { class: 'empty' }, 'Loading…')
  const iStatus = h('p', { class: 'empty' }, 'Loading…')
  const cacheBody = h('tbody')
  const cacheCount = h('summary')
  const cacheList = h('details', { class: 'cache hidden' }, cacheCount,
    h('table', { class: 'list' }, cacheBody))
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
    iStatus,
    cacheList)
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
      // What template builds keep to skip steps they ran before goes
      // in a list of its own, folded.
      const cached = (img: ImageJSON) => img.names.length > 0 && img.names.every((n) => n.startsWith(buildCache))
      const named = i.value.filter((img) => !cached(img))
      const cache = i.value.filter(cached)
      replace(images, ...named.map(imageRow))
      replace(cacheBody, ...cache.map(imageRow))
      text(cacheCount, `Template build cache: ${cache.length} image${cache.length === 1 ? '' : 's'}`)
      cacheList.classList.toggle('hidden', cache.length === 0)
      text(iStatus, named.length ? '' : 'No images.')
    } else {
      text(iStatus, `cannot list images: ${errorText(i.reason)}`)
    }
  }
  return { close: every(10_000, refresh) }
}
