// TupperFilesystem: a Mastra workspace filesystem that is the sandbox's own,
// so that an agent's file tools and its commands see the same files.

import {
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  FilesystemError,
  IsDirectoryError,
  MastraFilesystem,
  NotDirectoryError,
  PermissionError,
  StaleFileError,
  WorkspaceReadOnlyError,
  type CopyOptions,
  type FileContent,
  type FileEntry,
  type FilesystemInfo,
  type FileStat,
  type ListOptions,
  type MastraFilesystemOptions,
  type ProviderStatus,
  type ReadOptions,
  type RemoveOptions,
  type WriteOptions,
} from "@mastra/core/workspace";
import { CommandExitError, NotFoundError, type EntryInfo, type Sandbox } from "e2b";
import { answerText, readFileBytes, writeFileBytes, type FileAnswer } from "./files.js";
import type { TupperSandbox } from "./sandbox.js";

/** Options of a TupperFilesystem. */
export interface TupperFilesystemOptions extends MastraFilesystemOptions {
  /** The sandbox whose files these are; it is started on first use. */
  sandbox: TupperSandbox;
  /** Default: `tupper-fs-<sandbox's id>`. */
  id?: string;
  /** Refuse every write with WorkspaceReadOnlyError. */
  readOnly?: boolean;
}

/**
 * TupperFilesystem is the filesystem of a TupperSandbox, as a Mastra
 * WorkspaceFilesystem: give a Workspace both, and the agent's file tools
 * read and write the very files its commands see. Paths are the sandbox's:
 * absolute, or relative to the home of the sandbox's user. Operations run
 * as that user, and fail with Mastra's filesystem errors
 * (FileNotFoundError, PermissionError, IsDirectoryError…).
 */
export class TupperFilesystem extends MastraFilesystem {
  readonly id: string;
  readonly name = "TupperFilesystem";
  readonly provider = "tupper";
  readonly readOnly: boolean;
  status: ProviderStatus = "pending";
  readonly sandbox: TupperSandbox;

  constructor(opts: TupperFilesystemOptions) {
    super({ ...opts, name: "TupperFilesystem" });
    this.sandbox = opts.sandbox;
    this.id = opts.id ?? `tupper-fs-${opts.sandbox.id}`;
    this.readOnly = opts.readOnly ?? false;
  }

  /** Starts the sandbox if it is not running. */
  override async init(): Promise<void> {
    await this.sandbox.ensureRunning();
  }

  getInfo(): FilesystemInfo {
    return { id: this.id, name: this.name, provider: this.provider, status: this.status, readOnly: this.readOnly };
  }

  getInstructions(): string {
    return "Files are those of the Tupper sandbox the commands run in: absolute paths, or paths relative to the user's home.";
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<string | Buffer> {
    const sb = await this.#sb();
    const a = await readFileBytes(sb, path, this.sandbox.user);
    if (a.status !== 200) throw await this.#answerError(sb, path, a, "read");
    const buf = Buffer.from(a.body.buffer, a.body.byteOffset, a.body.byteLength);
    return options.encoding ? buf.toString(options.encoding) : buf;
  }

  async writeFile(path: string, content: FileContent, options: WriteOptions = {}): Promise<void> {
    this.#assertWritable("writeFile");
    const sb = await this.#sb();
    if (options.recursive === false) {
      const parent = await this.#info(sb, dirname(path));
      if (!parent) throw new DirectoryNotFoundError(dirname(path));
      if (parent.type !== "dir") throw new NotDirectoryError(dirname(path));
    }
    if (options.overwrite === false || options.expectedMtime) {
      const cur = await this.#info(sb, path);
      if (cur && options.overwrite === false) throw new FileExistsError(path);
      if (cur?.modifiedTime && options.expectedMtime && cur.modifiedTime.getTime() !== options.expectedMtime.getTime()) {
        throw new StaleFileError(path, options.expectedMtime, cur.modifiedTime);
      }
    }
    const a = await writeFileBytes(sb, path, bytes(content), this.sandbox.user);
    if (a.status !== 200) throw await this.#answerError(sb, path, a, "write");
  }

  async appendFile(path: string, content: FileContent): Promise<void> {
    this.#assertWritable("appendFile");
    const sb = await this.#sb();
    const cur = await readFileBytes(sb, path, this.sandbox.user);
    if (cur.status !== 200 && cur.status !== 404) throw await this.#answerError(sb, path, cur, "read");
    const add = bytes(content);
    const old = cur.status === 200 ? cur.body : new Uint8Array();
    const all = new Uint8Array(old.length + add.length);
    all.set(old);
    all.set(add, old.length);
    const a = await writeFileBytes(sb, path, all, this.sandbox.user);
    if (a.status !== 200) throw await this.#answerError(sb, path, a, "write");
  }

  async deleteFile(path: string, options: RemoveOptions = {}): Promise<void> {
    this.#assertWritable("deleteFile");
    const sb = await this.#sb();
    const info = await this.#info(sb, path);
    if (!info) {
      if (options.force) return;
      throw new FileNotFoundError(path);
    }
    if (info.type === "dir") throw new IsDirectoryError(path);
    await sb.files.remove(path, { user: this.sandbox.user });
  }

  async copyFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    this.#assertWritable("copyFile");
    const sb = await this.#sb();
    const info = await this.#info(sb, src);
    if (!info) throw new FileNotFoundError(src);
    if (info.type === "dir" && !options.recursive) throw new IsDirectoryError(src);
    if (info.type !== "dir" && options.overwrite === false && (await this.#info(sb, dest))) throw new FileExistsError(dest);
    // -T: dest is the copy's own name even when it is a directory already;
    // -n: with overwrite false, files already in a copied directory stay.
    const flags = `-RT${options.overwrite === false ? "n" : ""}`;
    await this.#shell(sb, `mkdir -p -- ${quote(dirname(dest))} && cp ${flags} -- ${quote(src)} ${quote(dest)}`, dest, "copy");
  }

  async moveFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    this.#assertWritable("moveFile");
    const sb = await this.#sb();
    if (!(await this.#info(sb, src))) throw new FileNotFoundError(src);
    if (options.overwrite === false && (await this.#info(sb, dest))) throw new FileExistsError(dest);
    await sb.files.makeDir(dirname(dest), { user: this.sandbox.user });
    await sb.files.rename(src, dest, { user: this.sandbox.user });
  }

  async mkdir(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    this.#assertWritable("mkdir");
    const sb = await this.#sb();
    const info = await this.#info(sb, path);
    if (info) {
      if (info.type !== "dir") throw new FileExistsError(path);
      return;
    }
    if (options.recursive === false && !(await this.#info(sb, dirname(path)))) throw new DirectoryNotFoundError(dirname(path));
    await sb.files.makeDir(path, { user: this.sandbox.user });
  }

  async rmdir(path: string, options: RemoveOptions = {}): Promise<void> {
    this.#assertWritable("rmdir");
    const sb = await this.#sb();
    const info = await this.#info(sb, path);
    if (!info) {
      if (options.force) return;
      throw new DirectoryNotFoundError(path);
    }
    if (info.type !== "dir") throw new NotDirectoryError(path);
    if (!options.recursive && (await sb.files.list(path, { user: this.sandbox.user })).length > 0) {
      throw new DirectoryNotEmptyError(path);
    }
    await sb.files.remove(path, { user: this.sandbox.user });
  }

  async readdir(path: string, options: ListOptions = {}): Promise<FileEntry[]> {
    const sb = await this.#sb();
    const info = await this.#info(sb, path);
    if (!info) throw new DirectoryNotFoundError(path);
    if (info.type !== "dir") throw new NotDirectoryError(path);
    const depth = options.recursive ? (options.maxDepth ?? 100) + 1 : 1;
    const exts = options.extension === undefined ? undefined : [options.extension].flat().map((e) => e.replace(/^\./, ""));
    const base = info.path.replace(/\/+$/, "");
    const out: FileEntry[] = [];
    for (const e of await sb.files.list(path, { depth, user: this.sandbox.user })) {
      const type = e.type === "dir" ? "directory" : "file";
      if (exts && type === "file" && !exts.includes(e.name.includes(".") ? e.name.slice(e.name.lastIndexOf(".") + 1) : "")) continue;
      const entry: FileEntry = { name: e.path.startsWith(base + "/") ? e.path.slice(base.length + 1) : e.name, type };
      if (type === "file") entry.size = e.size;
      if (e.symlinkTarget) {
        entry.isSymlink = true;
        entry.symlinkTarget = e.symlinkTarget;
      }
      out.push(entry);
    }
    return out;
  }

  async exists(path: string): Promise<boolean> {
    return (await this.#info(await this.#sb(), path)) !== undefined;
  }

  async stat(path: string): Promise<FileStat> {
    const info = await this.#info(await this.#sb(), path);
    if (!info) throw new FileNotFoundError(path);
    const mtime = info.modifiedTime ?? new Date(0);
    return {
      name: info.name,
      path: info.path,
      type: info.type === "dir" ? "directory" : "file",
      size: info.size,
      createdAt: mtime,
      modifiedAt: mtime,
    };
  }

  async #sb(): Promise<Sandbox> {
    await this.sandbox.ensureRunning();
    return this.sandbox.e2b;
  }

  // #info stats path, following a final symlink as the file API does;
  // undefined when nothing is there.
  async #info(sb: Sandbox, path: string): Promise<EntryInfo | undefined> {
    try {
      return await sb.files.getInfo(path, { user: this.sandbox.user });
    } catch (err) {
      if (err instanceof NotFoundError) return undefined;
      throw err;
    }
  }

  #assertWritable(op: string): void {
    if (this.readOnly) throw new WorkspaceReadOnlyError(op);
  }

  // #answerError turns a failed read or write of path into Mastra's error.
  // The file API answers 400 both for a directory and for a path under a
  // file; a stat tells them apart.
  async #answerError(sb: Sandbox, path: string, a: FileAnswer, op: string): Promise<Error> {
    switch (a.status) {
      case 404:
        return new FileNotFoundError(path);
      case 401:
      case 403:
        return new PermissionError(path, op);
      case 400: {
        const info = await this.#info(sb, path).catch(() => undefined);
        if (info?.type === "dir") return new IsDirectoryError(path);
        const parent = await this.#info(sb, dirname(path)).catch(() => undefined);
        if (parent && parent.type !== "dir") return new NotDirectoryError(dirname(path));
        return new FilesystemError(`${op} ${path}: ${answerText(a)}`, "EINVAL", path);
      }
      case 507:
        return new FilesystemError(`${op} ${path}: the sandbox's disk is full`, "ENOSPC", path);
    }
    return new FilesystemError(`${op} ${path}: the sandbox answered ${a.status}: ${answerText(a)}`, "EIO", path);
  }

  async #shell(sb: Sandbox, cmd: string, path: string, op: string): Promise<void> {
    try {
      await sb.commands.run(cmd, { user: this.sandbox.user });
    } catch (err) {
      if (err instanceof CommandExitError) {
        throw new FilesystemError(`${op} ${path}: ${err.stderr.trim()}`, "EIO", path);
      }
      throw err;
    }
  }
}

function bytes(content: FileContent): Uint8Array {
  return typeof content === "string" ? new TextEncoder().encode(content) : new Uint8Array(content);
}

function dirname(path: string): string {
  const trimmed = path.replace(/\/+$/, "");
  const i = trimmed.lastIndexOf("/");
  if (i < 0) return ".";
  return i === 0 ? "/" : trimmed.slice(0, i);
}

function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
