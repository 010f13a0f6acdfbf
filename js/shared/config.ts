// Where `tupper serve` is and which key opens it, resolved the way the rest
// of Tupper (the CLI, the Go SDK, `tupper mcp`) resolves it.
//
// js/shared/config.ts is the one source of src/config.ts in every package
// under js/: each package's `npm run build` copies it there (the prebuild
// script) and compiles it into its own dist/, so a packed tarball needs
// nothing from js/shared. Edit js/shared/config.ts: the copies are
// git-ignored and overwritten by every build. js/shared/config.test.mjs
// runs in each package's `npm test`.

/** Options naming the Tupper daemon; each overrides the environment. */
export interface TupperConnectionOptions {
  /**
   * URL of `tupper serve`, e.g. `http://127.0.0.1:3000`. Default:
   * `$TUPPER_API_URL`, else `$E2B_API_URL`, else `http://127.0.0.1:3000`.
   */
  apiUrl?: string;
  /**
   * API key (`e2b_…`; the first `tupper serve` prints one, `tupper keys
   * create` makes more). Default: `$TUPPER_API_KEY`, else `$E2B_API_KEY`.
   */
  apiKey?: string;
  /**
   * Where the sandboxes' data plane is reached. `tupper serve` serves both
   * planes on one port, so the default is the API URL (or
   * `$TUPPER_SANDBOX_URL` / `$E2B_SANDBOX_URL` beside an API URL taken from
   * the same family of variables).
   */
  sandboxUrl?: string;
  /** Bound on each control-plane request, in milliseconds (the e2b SDK's default when unset). */
  requestTimeoutMs?: number;
}

/** The e2b SDK's connection options, pointed at Tupper. */
export interface ResolvedConnection {
  apiUrl: string;
  sandboxUrl: string;
  apiKey: string;
  requestTimeoutMs?: number;
}

/** DEFAULT_API_URL is where `tupper serve` listens unless told otherwise. */
export const DEFAULT_API_URL = "http://127.0.0.1:3000";

/**
 * resolveConnection turns options and the environment into the e2b SDK's
 * connection options. An API URL given explicitly serves both planes unless
 * a sandbox URL is given too: a data-plane URL from the environment belongs
 * to whatever endpoint the environment names, so half of one setting is
 * never paired with half of another.
 */
export function resolveConnection(
  opts: TupperConnectionOptions = {},
  env: Record<string, string | undefined> = process.env,
): ResolvedConnection {
  let apiUrl: string;
  let envSandboxUrl: string | undefined;
  if (opts.apiUrl) {
    apiUrl = opts.apiUrl;
  } else if (env.TUPPER_API_URL) {
    apiUrl = env.TUPPER_API_URL;
    envSandboxUrl = env.TUPPER_SANDBOX_URL;
  } else if (env.E2B_API_URL) {
    apiUrl = env.E2B_API_URL;
    envSandboxUrl = env.E2B_SANDBOX_URL;
  } else {
    apiUrl = DEFAULT_API_URL;
  }
  const sandboxUrl = opts.sandboxUrl || envSandboxUrl || apiUrl;
  const apiKey = opts.apiKey || env.TUPPER_API_KEY || env.E2B_API_KEY;
  if (!apiKey) {
    throw new Error(
      `no API key for tupper at ${apiUrl}: set TUPPER_API_KEY (the first \`tupper serve\` prints one; ` +
        "`tupper keys create` makes more) or pass apiKey",
    );
  }
  const resolved: ResolvedConnection = {
    apiUrl: baseUrl("API URL", apiUrl),
    sandboxUrl: baseUrl("sandbox URL", sandboxUrl),
    apiKey,
  };
  if (opts.requestTimeoutMs !== undefined) resolved.requestTimeoutMs = opts.requestTimeoutMs;
  return resolved;
}

// baseUrl checks that s is an http(s) URL without query or fragment and
// returns it without a trailing slash, which the SDK would double.
function baseUrl(what: string, s: string): string {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    throw new Error(`${what} ${JSON.stringify(s)}: want http(s)://host[:port][/path]`);
  }
  if ((u.protocol !== "http:" && u.protocol !== "https:") || u.search || u.hash) {
    throw new Error(`${what} ${JSON.stringify(s)}: want http(s)://host[:port][/path]`);
  }
  return s.replace(/\/+$/, "");
}
