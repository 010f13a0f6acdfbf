// TupperSandbox against a real `tupper serve`: deepagents' backend protocol
// (execute, uploadFiles, downloadFiles and their error codes), the
// factories (create, connect by id, kill). The configuration is tested in
// js/shared/config.test.mjs.
//
// Needs a running `tupper serve`: TUPPER_API_URL and TUPPER_API_KEY.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { SandboxNotFoundError } from "e2b";

import { TupperSandbox } from "../dist/index.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

describe("TupperSandbox", () => {
  let sb;

  before(async () => {
    sb = await TupperSandbox.create({ metadata: { test: "deepagents-backend" } });
  });

  after(async () => {
    await sb?.close();
  });

  test("has the sandbox's id", () => {
    assert.equal(sb.id, sb.sandbox.sandboxId);
    assert.ok(sb.id.length > 0);
  });

  test("execute interleaves stdout and stderr and returns the exit code", async () => {
    const res = await sb.execute("echo one; echo two >&2; sleep 0.2; echo three; exit 7");
    assert.equal(res.exitCode, 7);
    assert.equal(res.truncated, false);
    assert.match(res.output, /one\n(.|\n)*two\n(.|\n)*three\n/);
  });

  test("execute runs as the sandbox's user in its home", async () => {
    const res = await sb.execute("id -un; pwd");
    assert.deepEqual(res, { output: "user\n/home/user\n", exitCode: 0, truncated: false });
  });

  test("uploadFiles and downloadFiles move bytes both ways, with partial success", async () => {
    const bin = new Uint8Array(256).map((_, i) => i);
    const up = await sb.uploadFiles([
      ["/home/user/up/a.txt", enc.encode("alpha\n")],
      ["/home/user/up/deep/er/b.bin", bin],
      ["/etc/forbidden.txt", enc.encode("no")],
    ]);
    assert.deepEqual(up, [
      { path: "/home/user/up/a.txt", error: null },
      { path: "/home/user/up/deep/er/b.bin", error: null },
      { path: "/etc/forbidden.txt", error: "permission_denied" },
    ]);
    const down = await sb.downloadFiles(["/home/user/up/a.txt", "/home/user/up/deep/er/b.bin", "/home/user/up/missing.txt"]);
    assert.equal(dec.decode(down[0].content), "alpha\n");
    assert.equal(down[0].error, null);
    assert.deepEqual(down[1].content, bin);
    assert.deepEqual(down[2], { path: "/home/user/up/missing.txt", content: null, error: "file_not_found" });
  });

  test("downloadFiles reports deepagents' error codes", async () => {
    await sb.execute("mkdir -p /home/user/codes/dir && echo x > /home/user/codes/file");
    const cases = [
      { path: "/home/user/codes/nope", error: "file_not_found" },
      { path: "/home/user/codes/dir", error: "is_directory" },
      { path: "/etc/shadow", error: "permission_denied" },
      { path: "/home/user/codes/file/under-a-file", error: "invalid_path" },
      { path: "", error: "invalid_path" },
      { path: "/home/user/a\0b", error: "invalid_path" },
    ];
    const got = await sb.downloadFiles(cases.map((c) => c.path));
    assert.deepEqual(
      got,
      cases.map((c) => ({ path: c.path, content: null, error: c.error })),
    );
  });

  test("uploadFiles reports deepagents' error codes", async () => {
    await sb.execute("mkdir -p /home/user/codes2/dir && echo x > /home/user/codes2/file");
    const cases = [
      { path: "/home/user/codes2/dir", error: "is_directory" },
      { path: "/root/secret.txt", error: "permission_denied" },
      { path: "/home/user/codes2/file/under-a-file", error: "invalid_path" },
      { path: "", error: "invalid_path" },
    ];
    const got = await sb.uploadFiles(cases.map((c) => [c.path, enc.encode("data")]));
    assert.deepEqual(
      got,
      cases.map((c) => ({ path: c.path, error: c.error })),
    );
    // Nothing replaced the directory or the file.
    const check = await sb.execute("test -d /home/user/codes2/dir && cat /home/user/codes2/file");
    assert.deepEqual(check, { output: "x\n", exitCode: 0, truncated: false });
  });

  test("BaseSandbox's tools work on top: write, read, edit, ls, glob, grep, delete", async () => {
    assert.deepEqual(await sb.write("/home/user/tools/x.txt", "one\ntwo\nthree\n"), { path: "/home/user/tools/x.txt", filesUpdate: null });
    const read = await sb.read("/home/user/tools/x.txt", 1, 1);
    assert.match(read.content, /two/);
    assert.doesNotMatch(read.content, /one|three/);
    assert.equal((await sb.edit("/home/user/tools/x.txt", "two", "2")).occurrences, 1);
    const ls = await sb.ls("/home/user/tools");
    assert.deepEqual(
      ls.files.map((f) => [f.path, f.is_dir, f.size]),
      [["/home/user/tools/x.txt", false, "one\n2\nthree\n".length]],
    );
    const glob = await sb.glob("*.txt", "/home/user/tools");
    assert.deepEqual(glob.files.map((f) => f.path), ["x.txt"]);
    const grep = await sb.grep("thr", "/home/user/tools");
    assert.deepEqual(grep.matches, [{ path: "/home/user/tools/x.txt", line: 3, text: "three" }]);
    assert.deepEqual(await sb.delete("/home/user/tools"), { path: "/home/user/tools", filesUpdate: null });
    assert.match((await sb.read("/home/user/tools/x.txt")).error, /not found/);
  });

  test("execute caps its output and says so", async () => {
    const small = await TupperSandbox.connect(sb.id, { maxOutputChars: 1000 });
    const res = await small.execute("head -c 5000 /dev/zero | tr '\\0' a");
    assert.equal(res.exitCode, 0);
    assert.equal(res.truncated, true);
    assert.equal(res.output, "a".repeat(1000));
  });

  test("a command past commandTimeoutMs is killed and exits 124", async () => {
    const quick = await TupperSandbox.connect(sb.id, { commandTimeoutMs: 2000 });
    const res = await quick.execute("echo started; sleep 60; echo never");
    assert.equal(res.exitCode, 124);
    assert.match(res.output, /^started\n\[Command timed out after 2 s and was killed\]$/);
    // It is gone, not left running.
    const ps = await sb.execute("pgrep -x sleep || echo none");
    assert.equal(ps.output, "none\n");
  });

  test("connect reconnects by id and sees the same files; kill ends the sandbox", async () => {
    const other = await TupperSandbox.create({ metadata: { test: "deepagents-connect" } });
    let killed = false;
    try {
      await other.write("/home/user/kept.txt", "still here");
      const again = await TupperSandbox.connect(other.id);
      assert.equal(again.id, other.id);
      const [got] = await again.downloadFiles(["/home/user/kept.txt"]);
      assert.equal(dec.decode(got.content), "still here");
      assert.equal(await TupperSandbox.kill(other.id), true);
      killed = true;
      assert.equal(await again.isRunning(), false);
      await assert.rejects(TupperSandbox.connect(other.id), SandboxNotFoundError);
      assert.equal(await TupperSandbox.kill(other.id), false);
    } finally {
      if (!killed) await other.close();
    }
  });
});
