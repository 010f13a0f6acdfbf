// The dashboard's credential and its calls to the daemon. The credential
// is an API key, or the short-lived key a sign-in link was traded for; it
// lives in sessionStorage (this tab only, gone when the tab closes) and
// goes as X-API-Key on every control-plane call, never as a cookie, so no
// other site can make the browser act with it.

import type { ConnectionOpts } from 'e2b'

const storageKey = 'tupper.key'

export function currentKey(): string | null {
  return sessionStorage.getItem(storageKey)
}

export function setKey(key: string): void {
  sessionStorage.setItem(storageKey, key)
}

export function clearKey(): void {
  sessionStorage.removeItem(storageKey)
}

// Whoami is whom a credential acts for: its team, and whether it is a
// dashboard session's key (which a sign-out ends).
export interface Whoami {
  team: string
  session: boolean
}

// whoami asks the daemon whom key acts for.
export function whoami(key = currentKey()): Promise<Whoami> {
  return api<Whoami>('GET', 'whoami', undefined, key)
}

// Unauthorized is thrown when the daemon refused the credential; the
// dashboard then shows the sign-in page.
export class Unauthorized extends Error {
  constructor() {
    super('the daemon refused the key: sign in again')
  }
}

// isUnauthorized reports whether err means the credential was refused,
// whether it came from api() or from the e2b SDK.
export function isUnauthorized(err: unknown): boolean {
  return err instanceof Unauthorized || (err instanceof Error && err.name === 'AuthenticationError')
}

// sdkOptions are the e2b SDK's connection options: both planes on this
// page's own origin, as `tupper serve` serves them on one port.
export function sdkOptions(): ConnectionOpts {
  return {
    apiKey: currentKey() ?? undefined,
    apiUrl: location.origin,
    sandboxUrl: location.origin,
    domain: location.host,
    requestTimeoutMs: 30_000,
  }
}

// api calls the control plane at path (from the origin's root) and
// returns the JSON answer, or undefined for an empty one.
export async function api<T>(method: string, path: string, body?: unknown, key = currentKey()): Promise<T> {
  const headers: Record<string, string> = {}
  if (key) headers['X-API-Key'] = key
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  if (res.status === 401) throw new Unauthorized()
  const data = await res.text()
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`
    try {
      message = (JSON.parse(data) as { message?: string }).message || message
    } catch {
      // Not JSON: the status says enough.
    }
    throw new Error(message)
  }
  return (data ? JSON.parse(data) : undefined) as T
}

// errorText is what to show of err.
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
