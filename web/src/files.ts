// The file browser: list a directory, go in and up, upload into it,
// download and remove files; all through the data plane, as the e2b SDK
// does it.

import { FileType, type EntryInfo, type Sandbox } from 'e2b'

import { errorText } from './api'
import { confirmButton, h, replace, text } from './dom'
import { bytes, dateTime } from './format'
import type { Tab } from './sandbox'

// downloadLinkSeconds is how long a download link stays good.
const downloadLinkSeconds = 300

function parent(path: string): string {
  const i = path.replace(/\/+$/, '').lastIndexOf('/')
  return i <= 0 ? '/' : path.slice(0, i)
}

function join(dir: string, name: string): string {
  return dir.endsWith('/') ? dir + name : `${dir}/${name}`
}

export const filesTab: Tab = (el, ctx, sbx) => {
  let cwd = ''
  let sandbox: Sandbox | undefined
  let closed = false
  const pathInput = h('input', { class: 'path mono', 'aria-label': 'Directory', spellcheck: 'false' })
  const upload = h('input', { type: 'file', multiple: true, id: 'upload', class: 'hidden' })
  const status = h('span', { class: 'files-status' })
  const body = h('tbody')
  replace(el,
    h('form', {
      class: 'files-bar',
      onsubmit: (ev: Event) => {
        ev.preventDefault()
        void go(pathInput.value.trim() || '/')
      },
    },
    h('button', { type: 'button', title: 'Parent directory', onclick: () => void go(parent(cwd)) }, '↑ Up'),
    pathInput,
    h('button', { type: 'submit' }, 'Go'),
    h('button', { type: 'button', onclick: () => void go(cwd) }, 'Refresh'),
    h('label', { class: 'button primary', for: 'upload' }, 'Upload…'),
    upload,
    status),
    h('table', { class: 'list files', id: 'files' },
      h('thead', null, h('tr', null,
        h('th', null, 'Name'), h('th', { class: 'num' }, 'Size'), h('th', null, 'Modified'),
        h('th', null, 'Mode'), h('th', null, 'Owner'), h('th'))),
      body))

  const row = (e: EntryInfo) => {
    const isDir = e.type === FileType.DIR
    const name = isDir
      ? h('a', { href: '#', class: 'dir', onclick: (ev: Event) => { ev.preventDefault(); void go(e.path) } }, `${e.name}/`)
      : h('span', null, e.name, e.symlinkTarget ? ` → ${e.symlinkTarget}` : '')
    return h('tr', { 'data-name': e.name, 'data-type': e.type ?? '' },
      h('td', { class: 'mono' }, name),
      h('td', { class: 'num' }, isDir ? '' : bytes(e.size)),
      h('td', null, dateTime(e.modifiedTime)),
      h('td', { class: 'mono' }, e.permissions),
      h('td', null, `${e.owner}:${e.group}`),
      h('td', { class: 'actions' },
        isDir ? null : h('button', { type: 'button', class: 'download', onclick: () => void download(e) }, 'Download'),
        confirmButton('Delete', 'Confirm delete', async () => {
          try {
            await sandbox?.files.remove(e.path)
            await go(cwd)
          } catch (err) {
            ctx.fail(err)
          }
        })))
  }

  const go = async (path: string) => {
    if (!sandbox) return
    try {
      const list = await sandbox.files.list(path)
      if (closed) return
      list.sort((a, b) => Number(b.type === FileType.DIR) - Number(a.type === FileType.DIR) || a.name.localeCompare(b.name))
      cwd = path
      pathInput.value = path
      replace(body, ...list.map(row))
      if (list.length === 0) body.appendChild(h('tr', null, h('td', { colspan: 6, class: 'empty' }, 'Empty directory')))
    } catch (err) {
      ctx.fail(new Error(`${path}: ${errorText(err)}`))
    }
  }

  // download has the browser fetch the file from a signed link of the
  // data plane, streaming it to disk rather than holding it in the page.
  const download = async (e: EntryInfo) => {
    try {
      const url = await sandbox!.downloadUrl(e.path, { useSignatureExpiration: downloadLinkSeconds })
      const a = h('a', { href: url, download: e.name, class: 'hidden' })
      document.body.appendChild(a)
      a.click()
      a.remove()
    } catch (err) {
      ctx.fail(err)
    }
  }

  upload.addEventListener('change', async () => {
    const files = [...(upload.files ?? [])]
    upload.value = ''
    if (!sandbox || files.length === 0) return
    const dir = cwd
    try {
      for (const [i, f] of files.entries()) {
        text(status, `uploading ${f.name} (${i + 1} of ${files.length}, ${bytes(f.size)})…`)
        await sandbox.files.write(join(dir, f.name), f)
      }
      text(status, `uploaded ${files.length === 1 ? files[0].name : `${files.length} files`}`)
    } catch (err) {
      text(status, '')
      ctx.fail(new Error(`upload: ${errorText(err)}`))
    }
    await go(dir)
  })

  void (async () => {
    try {
      sandbox = await sbx.connect()
      // A relative path is the user's home; its answer names it in full.
      const home = await sandbox.files.getInfo('.')
      await go(home.path || '/')
    } catch (err) {
      text(status, `no file access: ${errorText(err)}`)
    }
  })()
  return () => {
    closed = true
  }
}
