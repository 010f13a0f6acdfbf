// What every page gets from the shell around it.

export interface Ctx {
  // fail reports err: a refused credential signs out, anything else is
  // shown in the page's banner.
  fail(err: unknown): void
  // notice shows a passing message in the banner.
  notice(message: string): void
}

// Page is what a route shows. close stops its polling and releases what
// it holds (a terminal's PTY); update, when set, takes a new hash of the
// same page (another tab) without rebuilding it.
export interface Page {
  close(): void
  update?(parts: string[]): void
}

// every runs fn now and then each period while the page is open, one run
// at a time, and returns how to stop it.
export function every(period: number, fn: () => Promise<void>): () => void {
  let stopped = false
  let timer: number | undefined
  const tick = async () => {
    try {
      await fn()
    } finally {
      if (!stopped) timer = window.setTimeout(tick, period)
    }
  }
  void tick()
  return () => {
    stopped = true
    window.clearTimeout(timer)
  }
}
