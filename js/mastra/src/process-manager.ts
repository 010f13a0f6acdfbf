// Processes of a Tupper sandbox as Mastra's SandboxProcessManager: every
// command, foreground or background, is a process of the sandbox's agent,
// reached through the e2b SDK's commands API.

import {
  ProcessHandle,
  SandboxProcessManager,
  type CommandResult,
  type ProcessInfo,
  type SpawnProcessOptions,
} from "@mastra/core/workspace";
import { CommandExitError, TimeoutError, type CommandHandle, type Sandbox } from "e2b";
import type { TupperSandbox } from "./sandbox.js";

// TIMEOUT_EXIT_CODE is what timeout(1) returns for a command it stopped.
const TIMEOUT_EXIT_CODE = 124;

/**
 * TupperProcessHandle is one process in the sandbox. Its output reaches the
 * handle as the sandbox sends it; `wait` settles when it exits.
 */
class TupperProcessHandle extends ProcessHandle {
  readonly pid: string;
  readonly #cmd: CommandHandle;
  readonly #sb: Sandbox;
  readonly #started = Date.now();
  readonly #timeoutMs: number;
  #killed = false;
  #result?: Promise<CommandResult>;

  constructor(cmd: CommandHandle, sb: Sandbox, timeoutMs: number, options?: SpawnProcessOptions) {
    super(options);
    this.pid = String(cmd.pid);
    this.#cmd = cmd;
    this.#sb = sb;
    this.#timeoutMs = timeoutMs;
  }

  get exitCode(): number | undefined {
    return this.#cmd.exitCode;
  }

  override async wait(): Promise<CommandResult> {
    this.#result ??= this.#wait();
    return this.#result;
  }

  async #wait(): Promise<CommandResult> {
    let exitCode: number;
    let timedOut = false;
    try {
      exitCode = (await this.#cmd.wait()).exitCode;
    } catch (err) {
      if (err instanceof CommandExitError) {
        exitCode = err.exitCode;
      } else if (err instanceof TimeoutError && this.#timeoutMs > 0) {
        // The sandbox ends a command at its deadline; make sure of it.
        await this.#cmd.kill().catch(() => false);
        exitCode = TIMEOUT_EXIT_CODE;
        timedOut = true;
      } else {
        throw err;
      }
    }
    const result: CommandResult = {
      success: exitCode === 0,
      exitCode,
      stdout: this.stdout,
      stderr: this.stderr,
      executionTimeMs: Date.now() - this.#started,
    };
    if (timedOut) result.timedOut = true;
    if (this.#killed) result.killed = true;
    return result;
  }

  async kill(): Promise<boolean> {
    if (this.exitCode !== undefined) return false;
    this.#killed = true;
    return this.#cmd.kill();
  }

  async sendStdin(data: string): Promise<void> {
    await this.#sb.commands.sendStdin(this.#cmd.pid, data);
  }

  override async closeStdin(): Promise<void> {
    await this.#sb.commands.closeStdin(this.#cmd.pid);
  }
}

/**
 * TupperProcessManager spawns, lists and re-attaches to the sandbox's
 * processes. A process outlives the handle that started it: after a
 * reconnect, `get(pid)` attaches to it again.
 */
export class TupperProcessManager extends SandboxProcessManager<TupperSandbox> {
  override async spawn(command: string, options: SpawnProcessOptions = {}): Promise<ProcessHandle> {
    const sb = this.sandbox.e2b;
    const envs: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...this.#overlay(), ...options.env })) {
      if (v !== undefined) envs[k] = v;
    }
    // 0: a process runs until it ends or is killed (the SDK's own default
    // would end it after a minute).
    const timeoutMs = options.timeout ?? 0;
    let handle: TupperProcessHandle | undefined;
    const early: Array<["out" | "err", string]> = [];
    const deliver = (kind: "out" | "err", data: string) => {
      if (!handle) early.push([kind, data]);
      else if (kind === "out") handle.emitStdout(data);
      else handle.emitStderr(data);
    };
    const cmd = await sb.commands.run(command, {
      background: true,
      stdin: options.stdinMode !== "ignore",
      cwd: options.cwd ?? this.sandbox.workingDirectory,
      envs,
      user: this.sandbox.user,
      timeoutMs,
      onStdout: (d) => deliver("out", d),
      onStderr: (d) => deliver("err", d),
    });
    handle = new TupperProcessHandle(cmd, sb, timeoutMs, options);
    handle.command = command;
    for (const [kind, data] of early) deliver(kind, data);
    if (options.abortSignal) {
      const signal = options.abortSignal;
      const onAbort = () => void handle?.kill().catch(() => false);
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }
    this._tracked.set(handle.pid, handle);
    return handle;
  }

  /** Lists the processes this manager tracks and every other process running in the sandbox. */
  override async list(): Promise<ProcessInfo[]> {
    const out = new Map<string, ProcessInfo>();
    for (const [pid, h] of this._tracked) {
      const info: ProcessInfo = { pid, command: h.command, running: h.exitCode === undefined };
      if (h.exitCode !== undefined) info.exitCode = h.exitCode;
      out.set(pid, info);
    }
    for (const p of await this.sandbox.e2b.commands.list()) {
      const pid = String(p.pid);
      if (!out.has(pid)) out.set(pid, { pid, command: [p.cmd, ...p.args].join(" "), running: true });
    }
    return [...out.values()];
  }

  /** Returns the handle of pid, attaching to a process started elsewhere (or before a reconnect). */
  override async get(pid: string): Promise<ProcessHandle | undefined> {
    const tracked = this._tracked.get(pid);
    if (tracked) return tracked;
    if (this._dismissed.has(pid) || !/^\d+$/.test(pid)) return undefined;
    const sb = this.sandbox.e2b;
    let handle: TupperProcessHandle | undefined;
    const early: Array<[boolean, string]> = [];
    let cmd: CommandHandle;
    try {
      cmd = await sb.commands.connect(Number(pid), {
        timeoutMs: 0,
        onStdout: (d) => {
          if (handle) handle.emitStdout(d);
          else early.push([true, d]);
        },
        onStderr: (d) => {
          if (handle) handle.emitStderr(d);
          else early.push([false, d]);
        },
      });
    } catch {
      return undefined;
    }
    handle = new TupperProcessHandle(cmd, sb, 0);
    for (const [isOut, d] of early) (isOut ? handle.emitStdout(d) : handle.emitStderr(d));
    this._tracked.set(pid, handle);
    return handle;
  }

  // #overlay is the sandbox's runtime environment overlay (setEnv), merged
  // into every spawn.
  #overlay(): Record<string, string | undefined> {
    return { ...this.env, ...this.sandbox.getEnv() };
  }
}
