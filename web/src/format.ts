// How numbers, sizes and times are shown.

export function bytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '–'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`
}

// duration shows a span of milliseconds coarsely: "42s", "3m 05s", "2h 10m", "3d 4h".
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '–'
  const s = Math.max(0, Math.floor(ms / 1000))
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`
  const hr = Math.floor(m / 60)
  if (hr < 48) return `${hr}h ${String(m % 60).padStart(2, '0')}m`
  return `${Math.floor(hr / 24)}d ${hr % 24}h`
}

export function dateTime(d: Date | string | undefined): string {
  if (!d) return '–'
  const t = typeof d === 'string' ? new Date(d) : d
  return Number.isNaN(t.getTime()) ? '–' : t.toLocaleString()
}

export function clock(d: Date): string {
  const p = (n: number, w = 2) => String(n).padStart(w, '0')
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`
}

// pairs reads lines of KEY=VALUE, ignoring blank lines; it throws on a
// line without "=".
export function pairs(s: string, what: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const raw of s.split('\n')) {
    const line = raw.trim()
    if (!line) continue
    const i = line.indexOf('=')
    if (i <= 0) throw new Error(`${what}: "${line}" is not KEY=VALUE`)
    out[line.slice(0, i).trim()] = line.slice(i + 1)
  }
  return out
}
