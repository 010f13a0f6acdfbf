// Small helpers to build the DOM. Text always goes in as text, never as
// HTML: whatever a sandbox says (file names, logs, metadata) is shown,
// not run.

type Child = Node | string | number | null | undefined | false
type Attrs = Record<string, string | number | boolean | EventListener | null | undefined>

// h makes an element with attributes, event listeners (keys "on…") and
// children.
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v)
    } else if (v === true) {
      el.setAttribute(k, '')
    } else {
      el.setAttribute(k, String(v))
    }
  }
  append(el, ...children)
  return el
}

// append adds children to el, skipping empty ones.
export function append(el: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue
    el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c)
  }
}

// replace empties el and gives it children.
export function replace(el: Node, ...children: Child[]): void {
  while (el.firstChild) el.removeChild(el.firstChild)
  append(el, ...children)
}

// text sets the text of el only when it changed, so that polling does not
// disturb a selection or relayout for nothing.
export function text(el: Node, s: string): void {
  if (el.textContent !== s) el.textContent = s
}

// confirmButton is a button that acts on its second click within a few
// seconds, saying so after the first: no modal dialog, which a browser
// may suppress.
export function confirmButton(label: string, confirmLabel: string, action: () => Promise<unknown> | void, cls = 'danger'): HTMLButtonElement {
  let armed: number | undefined
  const b = h('button', { class: cls, type: 'button' }, label)
  b.addEventListener('click', async () => {
    if (armed === undefined) {
      b.textContent = confirmLabel
      b.classList.add('armed')
      armed = window.setTimeout(() => {
        armed = undefined
        b.textContent = label
        b.classList.remove('armed')
      }, 4000)
      return
    }
    window.clearTimeout(armed)
    armed = undefined
    b.disabled = true
    try {
      await action()
    } finally {
      b.disabled = false
      b.textContent = label
      b.classList.remove('armed')
    }
  })
  return b
}
