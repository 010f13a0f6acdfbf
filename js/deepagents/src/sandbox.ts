// TupperSandbox: deepagents' sandbox backend protocol over a Tupper sandbox.

import {
  BaseSandbox,
  SandboxError,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileOperationError,
  type FileUploadResponse,
} from "deepagents";
import { CommandExitError, Sandbox, TimeoutError } from "e2b";
import { resolveConnection, type ResolvedConnection, type TupperConnectionOptions } from "./config.js";

/** Options of a TupperSandbox, whether it is created or reconnected. */
export interface TupperSandboxOptions extends TupperConnectionOptions {
  /**
   * Bound on one `execute` call, in milliseconds. A command still running
   * then is killed and reported with exit code 124, as timeout(1) does.
   * Default 30 minutes; 0 means no bound.
   */
  commandTimeoutMs?: number;
  /**
   * The user commands and file operations run as. Default: the sandbox's
   * default user (`user`, home /home/user, in Tupper's images).
   */
  user?: string;
  /** Working directory of commands. Default: the user's home. */
  cwd?: string;
  /**
   * Cap on the output `execute` keeps, in characters (stdout and stderr
   * together); past it the rest is dropped and `truncated` is set. Default
   * 10 MB.
   */
  maxOutputChars?: number;
}

/** Options of {@link TupperSandbox.create}. */
export interface TupperSandboxCreateOptions extends TupperSandboxOptions {
  /** Template (image) the sandbox boots from. Default `base`. */
  template?: string;
  /**
   * How long the sandbox lives, in milliseconds, before Tupper kills it;
   * {@link TupperSandbox.setTimeout} changes it later. Default 30 minutes.
   */
  timeoutMs?: number;
  /** Environment variables of every process in the sandbox. */
  envs?: Record<string, string>;
  /** Metadata to find the sandbox by later (`tupper ls --metadata k=v`). */
  metadata?: Record<string, string>;
}

const DEFAULT_TEMPLATE = "base";
const DEFAULT_SANDBOX_TIMEOUT_MS = 30 * 60_000;
const DEFAULT_COMMAND_TIMEOUT_MS = 30 * 60_000;
const DEFAULT_MAX_OUTPUT_CHARS = 10_000_000;
// TIMEOUT_EXIT_CODE is what timeout(1) returns for a command it stopped.
const TIMEOUT_EXIT_CODE = 124;

/**
 * TupperSandbox is a deepagents backend whose files and shell are those of
 * a Tupper sandbox: `execute` runs a command there, `uploadFiles` and
 * `downloadFiles` move bytes through the sandbox's file API, and every
 * other tool (ls, read, write, edit, glob, grep, delete) comes from
 * deepagents' BaseSandbox on top of those three.
 *
 * Make one with {@link TupperSandbox.create} or reconnect to a running
 * sandbox with {@link TupperSandbox.connect}; {@link TupperSandbox.close}
 * kills it. Methods may be called concurrently.
 */
export class TupperSandbox extends BaseSandbox {
  /** The sandbox's id in Tupper (what `tupper ls` shows). */
  readonly id: string;
  /** The e2b SDK's handle on the sandbox, for anything this class does not wrap. */
  readonly sandbox: Sandbox;

  readonly #commandTimeoutMs: number;
  readonly #user: string | undefined;
  readonly #cwd: string | undefined;
  readonly #maxOutputChars: number;

  /** Wraps an e2b SDK sandbox that is already connected to Tupper. */
  constructor(sandbox: Sandbox, opts: TupperSandboxOptions = {}) {
    super();
    this.sandbox = sandbox;
    this.id = sandbox.sandboxId;
    this.#commandTimeoutMs = opts.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    this.#user = opts.user;
    this.#cwd = opts.cwd;
    this.#maxOutputChars = opts.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  }

  /** Creates a sandbox on the Tupper daemon and returns it ready for use. */
  static async create(opts: TupperSandboxCreateOptions = {}): Promise<TupperSandbox> {
    const conn = resolveConnection(opts);
    const sandbox = await Sandbox.create(opts.template ?? DEFAULT_TEMPLATE, {
      ...conn,
      timeoutMs: opts.timeoutMs ?? DEFAULT_SANDBOX_TIMEOUT_MS,
      envs: opts.envs,
      metadata: opts.metadata,
    });
    return new TupperSandbox(sandbox, opts);
  }

  /**
   * Reconnects to a running sandbox by its id, e.g. from another process or
   * after a restart of the program. Its files and processes are as they
   * were. Throws the e2b SDK's SandboxNotFoundError when it is gone.
   */
  static async connect(sandboxId: string, opts: TupperSandboxOptions = {}): Promise<TupperSandbox> {
    const sandbox = await Sandbox.connect(sandboxId, resolveConnection(opts));
    return new TupperSandbox(sandbox, opts);
  }

  /**
   * Kills the sandbox by id without connecting to it. Returns false when it
   * was already gone.
   */
  static async kill(sandboxId: string, opts: TupperConnectionOptions = {}): Promise<boolean> {
    return Sandbox.kill(sandboxId, connectionOnly(resolveConnection(opts)));
  }

  /** Kills the sandbox: its processes end and its files are gone. */
  async close(): Promise<void> {
    await this.sandbox.kill();
  }

  /** Sets the sandbox to end timeoutMs from now (Tupper caps it at its --max-timeout). */
  async setTimeout(timeoutMs: number): Promise<void> {
    await this.sandbox.setTimeout(timeoutMs);
  }

  /** Reports whether the sandbox still runs. */
  async isRunning(): Promise<boolean> {
    return this.sandbox.isRunning();
  }

  /**
   * Runs command with bash in the sandbox and returns its stdout and stderr
   * interleaved as they came, and its exit code. A command that runs past
   * commandTimeoutMs is killed and gets exit code 124. Failures of the
   * sandbox itself (gone, unreachable) throw.
   */
  async execute(command: string): Promise<ExecuteResponse> {
    const out = new OutputBuffer(this.#maxOutputChars);
    const onData = (data: string) => out.push(data);
    try {
      const res = await this.sandbox.commands.run(command, {
        timeoutMs: this.#commandTimeoutMs,
        user: this.#user,
        cwd: this.#cwd,
        onStdout: onData,
        onStderr: onData,
      });
      return { output: out.text(), exitCode: res.exitCode, truncated: out.truncated };
    } catch (err) {
      if (err instanceof CommandExitError) {
        return { output: out.text(), exitCode: err.exitCode, truncated: out.truncated };
      }
      if (err instanceof TimeoutError) {
        const secs = Math.round(this.#commandTimeoutMs / 1000);
        out.note(`[Command timed out after ${secs} s and was killed]`);
        return { output: out.text(), exitCode: TIMEOUT_EXIT_CODE, truncated: out.truncated };
      }
      throw new SandboxError(`sandbox ${this.id}: execute: ${errorMessage(err)}`, "COMMAND_FAILED", asError(err));
    }
  }

  /**
   * Writes each file, creating missing parent directories, and reports per
   * file: permission_denied where the user may not write, is_directory
   * where the path is a directory, invalid_path where the path cannot be a
   * file (a parent is a file, the name is malformed). A failure of the
   * sandbox itself throws.
   */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    return Promise.all(
      files.map(async ([path, content]): Promise<FileUploadResponse> => {
        if (!validPath(path)) return { path, error: "invalid_path" };
        const url = await this.sandbox.uploadUrl(path, { user: this.#user });
        const res = await this.#fetch("upload", path, url, {
          method: "POST",
          headers: { "Content-Type": "application/octet-stream" },
          body: content,
        });
        await res.arrayBuffer();
        if (res.ok) return { path, error: null };
        return { path, error: await this.#fileError("upload", path, res) };
      }),
    );
  }

  /**
   * Reads each file and reports per file: file_not_found, permission_denied,
   * is_directory, or invalid_path (not a regular file, malformed). A
   * failure of the sandbox itself throws.
   */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    return Promise.all(
      paths.map(async (path): Promise<FileDownloadResponse> => {
        if (!validPath(path)) return { path, content: null, error: "invalid_path" };
        const url = await this.sandbox.downloadUrl(path, { user: this.#user });
        // Identity: Node's fetch inflates large gzip bodies slowly, and
        // the bytes cross loopback or a LAN.
        const res = await this.#fetch("download", path, url, { headers: { "Accept-Encoding": "identity" } });
        const body = new Uint8Array(await res.arrayBuffer());
        if (res.ok) return { path, content: body, error: null };
        return { path, content: null, error: await this.#fileError("download", path, res) };
      }),
    );
  }

  // #fetch sends one request of the sandbox's file API, turning a failure
  // to reach it into deepagents' SandboxError.
  async #fetch(op: string, path: string, url: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(url, init);
    } catch (err) {
      throw new SandboxError(`sandbox ${this.id}: ${op} ${path}: ${errorMessage(err)}`, "FILE_OPERATION_FAILED", asError(err));
    }
  }

  // #fileError maps the file API's answer for path to deepagents' error
  // codes. The API answers 400 both for a directory and for a path that
  // cannot be a file; a stat tells them apart. Statuses that say nothing
  // about the path (the sandbox is gone, its disk is full) throw.
  async #fileError(op: string, path: string, res: Response): Promise<FileOperationError> {
    switch (res.status) {
      case 404:
        return "file_not_found";
      case 401:
      case 403:
        return "permission_denied";
      case 400:
        return (await this.#isDirectory(path)) ? "is_directory" : "invalid_path";
    }
    throw new SandboxError(
      `sandbox ${this.id}: ${op} ${path}: the sandbox answered ${res.status} ${res.statusText}`,
      "FILE_OPERATION_FAILED",
    );
  }

  async #isDirectory(path: string): Promise<boolean> {
    try {
      const info = await this.sandbox.files.getInfo(path, { user: this.#user });
      return info.type === "dir";
    } catch {
      return false;
    }
  }
}

// connectionOnly drops what the e2b SDK's API-only calls do not take.
function connectionOnly(c: ResolvedConnection): Omit<ResolvedConnection, "sandboxUrl"> {
  const { sandboxUrl: _unused, ...rest } = c;
  return rest;
}

// validPath reports whether path can name a file at all: a NUL byte ends a
// path in every system call, and an empty path names nothing.
function validPath(path: string): boolean {
  return path !== "" && !path.includes("\0");
}

// OutputBuffer keeps a command's output up to a number of characters.
class OutputBuffer {
  #parts: string[] = [];
  #size = 0;
  truncated = false;

  constructor(readonly max: number) {}

  push(s: string): void {
    const room = this.max - this.#size;
    if (room <= 0) {
      this.truncated ||= s.length > 0;
      return;
    }
    if (s.length > room) {
      s = s.slice(0, room);
      this.truncated = true;
    }
    this.#parts.push(s);
    this.#size += s.length;
  }

  // note appends a line of the adapter's own, never dropped.
  note(line: string): void {
    const text = this.#parts.join("");
    this.#parts = [text, text === "" || text.endsWith("\n") ? "" : "\n", line];
  }

  text(): string {
    return this.#parts.join("");
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function asError(err: unknown): Error | undefined {
  return err instanceof Error ? err : undefined;
}
