// TupperSandbox: a Mastra workspace sandbox in a Tupper sandbox.

import {
  MastraSandbox,
  SandboxAbortError,
  SandboxError,
  SandboxNotReadyError,
  type MastraSandboxOptions,
  type ProviderStatus,
  type SandboxCloneOptions,
  type SandboxFileInput,
  type SandboxInfo,
  type SandboxNetworking,
  type SandboxStartResult,
  type WriteFilesOptions,
} from "@mastra/core/workspace";
import { Sandbox } from "e2b";
import { resolveConnection, type TupperConnectionOptions } from "./config.js";
import { answerText, writeFileBytes } from "./files.js";
import { TupperProcessManager } from "./process-manager.js";

/** Options of a TupperSandbox. */
export interface TupperSandboxOptions extends TupperConnectionOptions, Omit<MastraSandboxOptions, "processes"> {
  /**
   * Mastra's logical id of this sandbox. Starting a TupperSandbox whose id
   * names a running Tupper sandbox (found by its `mastra-sandbox-id`
   * metadata) reconnects to it; otherwise a new one is created. Default: a
   * fresh id.
   */
  id?: string;
  /**
   * The Tupper sandbox to attach to (the id `tupper ls` shows), instead of
   * finding or creating one: reconnect by id.
   */
  sandboxId?: string;
  /** Template (image) a new sandbox boots from. Default `base`. */
  template?: string;
  /**
   * How long a new sandbox lives, in milliseconds, before Tupper kills it
   * (also set again on each reconnect). Default 30 minutes.
   */
  timeoutMs?: number;
  /** Metadata of a new sandbox (`tupper ls --metadata k=v` finds it). */
  metadata?: Record<string, string>;
  /** The user commands and files run as. Default: the image's `user` (home /home/user). */
  user?: string;
  /** Replaces the text getInstructions() gives agents. */
  instructions?: string;
}

const DEFAULT_TEMPLATE = "base";
const DEFAULT_TIMEOUT_MS = 30 * 60_000;
// METADATA_ID is the metadata key holding Mastra's logical id, the same
// key @mastra/e2b uses, so that either finds the other's sandboxes.
const METADATA_ID = "mastra-sandbox-id";

/**
 * TupperSandbox runs a Mastra workspace's commands and processes in a
 * sandbox of `tupper serve`.
 *
 * Lifecycle, as Mastra calls it: `start()` attaches to `sandboxId`, else
 * reconnects to the running sandbox whose metadata carries this `id`, else
 * creates one. `stop()` detaches and leaves the sandbox running (until its
 * timeout), so that the next `start()` finds it with its files and
 * processes as they were: Tupper cannot pause a sandbox yet. `destroy()`
 * kills it.
 */
export class TupperSandbox extends MastraSandbox {
  readonly id: string;
  readonly name = "TupperSandbox";
  readonly provider = "tupper";
  status: ProviderStatus = "pending";
  declare readonly processes: TupperProcessManager;

  /** Public URLs of the sandbox's ports: `http(s)://<port>-<sandbox id>.<domain of tupper serve>`. */
  override readonly networking: SandboxNetworking = {
    getPortUrl: async (port: number) => {
      if (!this.#sandbox) return null;
      return `${new URL(this.#conn().apiUrl).protocol}//${this.#sandbox.getHost(port)}`;
    },
  };

  readonly #opts: TupperSandboxOptions;
  #sandboxId: string | undefined;
  #sandbox: Sandbox | null = null;
  #createdAt: Date | undefined;

  constructor(opts: TupperSandboxOptions = {}) {
    super({ ...opts, name: "TupperSandbox", processes: new TupperProcessManager({ env: opts.env ?? {} }) });
    this.#opts = { ...opts };
    this.id = opts.id ?? `tupper-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
    this.#sandboxId = opts.sandboxId;
  }

  /** The Tupper sandbox's id, once started (or as given). */
  get sandboxId(): string | undefined {
    return this.#sandboxId;
  }

  /** The user commands and files run as; undefined means the image's default. */
  get user(): string | undefined {
    return this.#opts.user;
  }

  /** The e2b SDK's handle on the running sandbox, for what this class does not wrap. */
  get e2b(): Sandbox {
    if (!this.#sandbox) throw new SandboxNotReadyError(this.id);
    return this.#sandbox;
  }

  /** Attaches to, reconnects to, or creates the sandbox; see the class comment. */
  override async start(): Promise<SandboxStartResult> {
    if (this.#sandbox) return { outcome: "connected" };
    const conn = this.#conn();
    const timeoutMs = this.#opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const id = this.#sandboxId ?? (await this.#findByLogicalId());
    if (id) {
      this.#sandbox = await Sandbox.connect(id, { ...conn, timeoutMs });
      this.#sandboxId = id;
      this.#createdAt ??= new Date();
      return { outcome: "connected" };
    }
    this.#sandbox = await Sandbox.create(this.#opts.template ?? DEFAULT_TEMPLATE, {
      ...conn,
      timeoutMs,
      metadata: { ...this.#opts.metadata, [METADATA_ID]: this.id },
    });
    this.#sandboxId = this.#sandbox.sandboxId;
    this.#createdAt = new Date();
    return { outcome: "created" };
  }

  /**
   * Detaches from the sandbox and leaves it running until its timeout; the
   * next start() reconnects to it. (Mastra's stop is a pause; Tupper has
   * no pause yet, and killing would lose what start() should find again.)
   */
  override async stop(): Promise<void> {
    this.#sandbox = null;
  }

  /** Kills the sandbox, attached or not. */
  override async destroy(): Promise<void> {
    const id = this.#sandbox?.sandboxId ?? this.#sandboxId ?? (await this.#findByLogicalId());
    this.#sandbox = null;
    if (id) await Sandbox.kill(id, this.#apiConn());
  }

  override async getInfo(): Promise<SandboxInfo> {
    return {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: this.#createdAt ?? new Date(),
      metadata: {
        ...this.#opts.metadata,
        sandboxId: this.#sandboxId,
        template: this.#opts.template ?? DEFAULT_TEMPLATE,
      },
    };
  }

  override getInstructions(): string {
    if (this.#opts.instructions !== undefined) return this.#opts.instructions;
    const user = this.#opts.user ?? "user";
    const dir = this.workingDirectory ?? (user === "root" ? "/root" : `/home/${user}`);
    return `Linux sandbox (Tupper, gVisor). Commands run with bash as ${user} in ${dir}.`;
  }

  /**
   * Writes files into the sandbox (parents are created), then sets the mode
   * of those that ask for one.
   */
  override async writeFiles(files: SandboxFileInput[], options: WriteFilesOptions = {}): Promise<void> {
    const signal = options.abortSignal;
    if (signal?.aborted) throw new SandboxAbortError("writeFiles", signal.reason);
    for (const f of files) {
      if (f.mode !== undefined && !(Number.isInteger(f.mode) && f.mode >= 1 && f.mode <= 0o777)) {
        throw new SandboxError(`writeFiles ${f.path}: mode ${f.mode} is not in 0o001-0o777`, "INVALID_ARGUMENT");
      }
    }
    await this.ensureRunning();
    const sb = this.e2b;
    const enc = new TextEncoder();
    for (const f of files) {
      if (signal?.aborted) throw new SandboxAbortError("writeFiles", signal.reason);
      const data = typeof f.content === "string" ? enc.encode(f.content) : new Uint8Array(f.content);
      const a = await writeFileBytes(sb, f.path, data, this.#opts.user);
      if (a.status !== 200) {
        throw new SandboxError(`writeFiles ${f.path}: the sandbox answered ${a.status}: ${answerText(a)}`, "WRITE_FAILED", {
          path: f.path,
          status: a.status,
        });
      }
      if (f.mode !== undefined) {
        await sb.commands.run(`chmod ${f.mode.toString(8)} -- ${shellQuote(f.path)}`, { user: this.#opts.user });
      }
    }
  }

  /** A sibling with this one's configuration and per-instance overrides; no I/O until it starts. */
  clone(options: SandboxCloneOptions = {}): TupperSandbox {
    const { id: _id, sandboxId: _sandboxId, ...base } = this.#opts;
    return new TupperSandbox({
      ...base,
      ...(options.id !== undefined && { id: options.id }),
      ...(options.sandboxId !== undefined && { sandboxId: options.sandboxId }),
      ...(options.env !== undefined && { env: options.env }),
      ...(options.workingDirectory !== undefined && { workingDirectory: options.workingDirectory }),
      ...(options.idleTimeoutMinutes !== undefined && { timeoutMs: options.idleTimeoutMinutes * 60_000 }),
    });
  }

  #conn() {
    return resolveConnection(this.#opts);
  }

  #apiConn() {
    const { sandboxUrl: _unused, ...rest } = this.#conn();
    return rest;
  }

  // #findByLogicalId returns the id of a running sandbox whose metadata
  // names this.id, or undefined.
  async #findByLogicalId(): Promise<string | undefined> {
    const page = Sandbox.list({ ...this.#apiConn(), query: { metadata: { [METADATA_ID]: this.id }, state: ["running"] } });
    const found = await page.nextItems();
    return found[0]?.sandboxId;
  }
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
