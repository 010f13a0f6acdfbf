// Moving a file's bytes in and out of a sandbox through its file API, with
// the HTTP status kept: the e2b SDK folds 403 into a generic error, and
// callers here must tell "permission denied" from "the sandbox is gone".

import type { Sandbox } from "e2b";

/** The answer of the sandbox's file API to one read or write. */
export interface FileAnswer {
  /** The HTTP status: 200, or 400 (a directory, not a regular file, a parent that is a file), 401/403, 404, 507… */
  status: number;
  /** The file's bytes on a successful read; the error text otherwise. */
  body: Uint8Array;
}

/** readFileBytes reads path as user (undefined: the sandbox's default user). */
export async function readFileBytes(sb: Sandbox, path: string, user?: string): Promise<FileAnswer> {
  const url = await sb.downloadUrl(path, { user });
  // Identity: Node's fetch inflates large gzip bodies slowly, and the
  // bytes cross loopback or a LAN.
  const res = await fetch(url, { headers: { "Accept-Encoding": "identity" } });
  return { status: res.status, body: new Uint8Array(await res.arrayBuffer()) };
}

/** writeFileBytes writes data to path as user, creating missing parents. */
export async function writeFileBytes(sb: Sandbox, path: string, data: Uint8Array, user?: string): Promise<FileAnswer> {
  const url = await sb.uploadUrl(path, { user });
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/octet-stream" },
    body: data,
  });
  return { status: res.status, body: new Uint8Array(await res.arrayBuffer()) };
}

/** answerText is the error text of an answer, for messages. */
export function answerText(a: FileAnswer): string {
  return new TextDecoder().decode(a.body).trim();
}
