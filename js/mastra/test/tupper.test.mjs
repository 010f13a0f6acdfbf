// @tupper/mastra against a real `tupper serve`: a Mastra Workspace whose
// sandbox and filesystem are a Tupper sandbox's: commands, processes,
// files both ways, stop/start, reconnect by id, destroy, port URLs.
//
// Needs a running `tupper serve`: TUPPER_API_URL and TUPPER_API_KEY.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";

import {
  DirectoryNotEmptyError,
  FileExistsError,
  FileNotFoundError,
  IsDirectoryError,
  PermissionError,
  Workspace,
  createWorkspaceTools,
} from "@mastra/core/workspace";
import { NotFoundError, Sandbox } from "e2b";

import { TupperFilesystem, TupperSandbox, resolveConnection } from "../dist/index.js";

const conn = resolveConnection();

describe("a Mastra Workspace on TupperSandbox and TupperFilesystem", () => {
  let sandbox;
  let fs;
  let ws;

  before(async () => {
    sandbox = new TupperSandbox({ metadata: { test: "mastra" } });
    fs = new TupperFilesystem({ sandbox });
    ws = new Workspace({ sandbox, filesystem: fs });
    await ws.init();
  });

  after(async () => {
    await sandbox?._destroy();
  });

  test("init starts a Tupper sandbox", async () => {
    assert.equal(sandbox.status, "running");
    assert.ok(sandbox.sandboxId);
    const info = await Sandbox.getInfo(sandbox.sandboxId, conn);
    assert.equal(info.metadata["mastra-sandbox-id"], sandbox.id);
    assert.equal(info.metadata.test, "mastra");
  });

  test("executeCommand runs commands, quotes arguments, and reports exit codes", async () => {
    const ok = await sandbox.executeCommand("printf", ["%s|", "two words", "it's"]);
    assert.equal(ok.stdout, "two words|it's|");
    assert.equal(ok.exitCode, 0);
    assert.equal(ok.success, true);
    const bad = await sandbox.executeCommand("echo oops >&2; exit 3");
    assert.equal(bad.exitCode, 3);
    assert.equal(bad.success, false);
    assert.equal(bad.stderr, "oops\n");
    const where = await sandbox.executeCommand("id -un; pwd; echo $GREETING", [], { cwd: "/tmp", env: { GREETING: "hi" } });
    assert.equal(where.stdout, "user\n/tmp\nhi\n");
  });

  test("setEnv's overlay reaches every command", async () => {
    sandbox.setEnv((env) => ({ ...env, OVERLAY: "yes" }));
    try {
      assert.equal((await sandbox.executeCommand("echo $OVERLAY")).stdout, "yes\n");
    } finally {
      sandbox.setEnv(({ OVERLAY: _drop, ...env }) => env);
    }
  });

  test("processes: spawn, stream, stdin, list, kill", async () => {
    const seen = [];
    const ticker = await sandbox.processes.spawn("for i in 1 2 3; do echo tick $i; sleep 0.1; done", {
      onStdout: (d) => seen.push(d),
    });
    const res = await ticker.wait();
    assert.equal(res.exitCode, 0);
    assert.equal(res.stdout, "tick 1\ntick 2\ntick 3\n");
    assert.equal(seen.join(""), "tick 1\ntick 2\ntick 3\n");

    const cat = await sandbox.processes.spawn("cat");
    await cat.sendStdin("through stdin\n");
    await cat.closeStdin();
    assert.equal((await cat.wait()).stdout, "through stdin\n");

    const sleeper = await sandbox.processes.spawn("sleep 300");
    const listed = await sandbox.processes.list();
    assert.ok(listed.some((p) => p.pid === sleeper.pid && p.running), JSON.stringify(listed));
    assert.equal(await sleeper.kill(), true);
    const killed = await sleeper.wait();
    assert.equal(killed.success, false);
    assert.equal(killed.killed, true);
  });

  test("a command past its timeout is killed and exits 124", async () => {
    const res = await sandbox.executeCommand("echo started; sleep 60", [], { timeout: 1500 });
    assert.equal(res.exitCode, 124);
    assert.equal(res.stdout, "started\n");
    assert.equal((await sandbox.executeCommand("pgrep -x sleep || echo none")).stdout, "none\n");
  });

  test("files written through the filesystem are the commands' files, and back", async () => {
    await ws.filesystem.writeFile("/home/user/ws/a.txt", "alpha\n");
    assert.equal((await sandbox.executeCommand("cat /home/user/ws/a.txt")).stdout, "alpha\n");
    await sandbox.executeCommand("printf 'beta' > /home/user/ws/b.txt && mkdir -p /home/user/ws/sub && echo c > /home/user/ws/sub/c.md");
    assert.equal(await fs.readFile("/home/user/ws/b.txt", { encoding: "utf8" }), "beta");
    assert.deepEqual(await fs.readFile("ws/b.txt"), Buffer.from("beta"));
    await fs.appendFile("/home/user/ws/b.txt", "+more");
    assert.equal(await fs.readFile("/home/user/ws/b.txt", { encoding: "utf8" }), "beta+more");

    const names = (await fs.readdir("/home/user/ws")).map((e) => `${e.name}:${e.type}`).sort();
    assert.deepEqual(names, ["a.txt:file", "b.txt:file", "sub:directory"]);
    const deep = (await fs.readdir("/home/user/ws", { recursive: true, extension: ".md" })).map((e) => e.name).sort();
    assert.deepEqual(deep, ["sub", "sub/c.md"]);

    const st = await fs.stat("/home/user/ws/a.txt");
    assert.equal(st.type, "file");
    assert.equal(st.size, 6);
    assert.equal(await fs.exists("/home/user/ws/sub"), true);
    assert.equal(await fs.exists("/home/user/ws/none"), false);

    await fs.copyFile("/home/user/ws/sub", "/home/user/ws/sub2", { recursive: true });
    await fs.moveFile("/home/user/ws/a.txt", "/home/user/ws/moved/a.txt");
    await fs.mkdir("/home/user/ws/empty");
    assert.equal((await sandbox.executeCommand("cd /home/user/ws && find . | sort")).stdout,
      ".\n./b.txt\n./empty\n./moved\n./moved/a.txt\n./sub\n./sub/c.md\n./sub2\n./sub2/c.md\n");
    await fs.deleteFile("/home/user/ws/b.txt");
    await fs.rmdir("/home/user/ws/empty");
    await fs.rmdir("/home/user/ws/sub2", { recursive: true });
    assert.equal((await sandbox.executeCommand("cd /home/user/ws && find . | sort")).stdout, ".\n./moved\n./moved/a.txt\n./sub\n./sub/c.md\n");
  });

  test("Mastra's workspace tools, which agents call, act in the sandbox", async () => {
    const tools = await createWorkspaceTools(ws);
    const call = (name, args) => tools[`mastra_workspace_${name}`].execute(args, { workspace: ws });
    assert.match(await call("write_file", { path: "/home/user/tools/x.py", content: "print(6 * 7)\n" }), /Wrote 13 bytes/);
    assert.match(await call("read_file", { path: "/home/user/tools/x.py" }), /print\(6 \* 7\)/);
    assert.match(await call("edit_file", { path: "/home/user/tools/x.py", old_string: "6 * 7", new_string: "6 * 7 + 1", replace_all: false }), /Replaced 1 occurrence/);
    assert.match(await call("execute_command", { command: "python3 /home/user/tools/x.py" }), /^43\n/);
    assert.match(await call("grep", { pattern: "print", path: "/home/user/tools" }), /\/home\/user\/tools\/x\.py:1:1: print\(6 \* 7 \+ 1\)/);
    assert.match(await call("list_files", { path: "/home/user/tools" }), /x\.py/);
  });

  test("the filesystem fails with Mastra's errors", async () => {
    await sandbox.executeCommand("mkdir -p /home/user/err/dir && echo x > /home/user/err/dir/f");
    await assert.rejects(fs.readFile("/home/user/err/missing"), FileNotFoundError);
    await assert.rejects(fs.readFile("/home/user/err/dir"), IsDirectoryError);
    await assert.rejects(fs.readFile("/etc/shadow"), PermissionError);
    await assert.rejects(fs.writeFile("/etc/tupper.txt", "no"), PermissionError);
    await assert.rejects(fs.writeFile("/home/user/err/dir/f", "y", { overwrite: false }), FileExistsError);
    await assert.rejects(fs.deleteFile("/home/user/err/dir"), IsDirectoryError);
    await assert.rejects(fs.rmdir("/home/user/err/dir"), DirectoryNotEmptyError);
    await fs.deleteFile("/home/user/err/none", { force: true });
  });

  test("writeFiles writes in bulk and sets modes", async () => {
    await sandbox.writeFiles([
      { path: "/home/user/bin/hello.sh", content: "#!/bin/sh\necho hello from a script\n", mode: 0o755 },
      { path: "/home/user/bin/data.bin", content: Buffer.from([0, 1, 2, 255]) },
    ]);
    assert.equal((await sandbox.executeCommand("/home/user/bin/hello.sh")).stdout, "hello from a script\n");
    assert.equal((await sandbox.executeCommand("stat -c %a /home/user/bin/hello.sh; od -An -tu1 /home/user/bin/data.bin")).stdout, "755\n   0   1   2 255\n");
  });

  test("getPortUrl names a URL that tupper serve routes to the sandbox's port", async () => {
    await sandbox.executeCommand("mkdir -p /home/user/site && echo served > /home/user/site/index.txt");
    const server = await sandbox.processes.spawn("python3 -m http.server 8080 --bind 0.0.0.0", { cwd: "/home/user/site" });
    try {
      const url = new URL(await sandbox.networking.getPortUrl(8080));
      assert.equal(url.protocol, "http:");
      assert.ok(url.host.startsWith(`8080-${sandbox.sandboxId}.`), url.host);
      // *.localhost does not resolve everywhere: send the request to the
      // daemon itself, with the URL's host.
      let body;
      for (let i = 0; i < 100 && body !== "served\n"; i++) {
        body = await getVia(conn.apiUrl, url.host, "/index.txt").catch(() => undefined);
        if (body !== "served\n") await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(body, "served\n");
    } finally {
      await server.kill();
    }
  });
});

describe("TupperSandbox lifecycle", () => {
  test("stop detaches and start finds the same sandbox; reconnect by id and by Mastra id; destroy kills", async () => {
    const first = new TupperSandbox({ metadata: { test: "mastra-lifecycle" } });
    let destroyed = false;
    try {
      await first._start();
      const id = first.sandboxId;
      await first.executeCommand("echo kept > /home/user/kept.txt");
      const bg = await first.processes.spawn("sleep 300");

      await first._stop();
      assert.equal(first.status, "stopped");
      assert.equal((await Sandbox.getInfo(id, conn)).state, "running");
      await first._start();
      assert.equal(first.sandboxId, id);
      assert.equal((await first.executeCommand("cat /home/user/kept.txt")).stdout, "kept\n");

      // Another program: by the Tupper sandbox id, and by Mastra's id.
      const byId = new TupperSandbox({ sandboxId: id });
      await byId._start();
      assert.equal((await byId.executeCommand("cat /home/user/kept.txt")).stdout, "kept\n");
      const listed = await byId.processes.list();
      assert.ok(listed.some((p) => p.pid === bg.pid && p.running), JSON.stringify(listed));
      const attached = await byId.processes.get(bg.pid);
      assert.equal(await attached.kill(), true);
      const byMastraId = new TupperSandbox({ id: first.id });
      await byMastraId._start();
      assert.equal(byMastraId.sandboxId, id);

      await byMastraId._destroy();
      destroyed = true;
      assert.equal(byMastraId.status, "destroyed");
      await assert.rejects(Sandbox.getInfo(id, conn), NotFoundError);
    } finally {
      if (!destroyed) await first._destroy();
    }
  });

  test("a clone shares the configuration and gets its own sandbox", async () => {
    const parent = new TupperSandbox({ metadata: { test: "mastra-clone" }, user: "root" });
    const child = parent.clone({ id: "clone-of-parent" });
    try {
      assert.equal(child.id, "clone-of-parent");
      assert.equal((await child.executeCommand("id -un")).stdout, "root\n");
      assert.equal((await Sandbox.getInfo(child.sandboxId, conn)).metadata.test, "mastra-clone");
    } finally {
      await child._destroy();
    }
  });
});

// getVia sends GET path to base's address with the Host header host.
function getVia(base, host, path) {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, headers: { Host: host } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (body += d));
      res.on("end", () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${res.statusCode}: ${body}`))));
    });
    req.on("error", reject);
    req.end();
  });
}
