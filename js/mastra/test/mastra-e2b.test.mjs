// The published @mastra/e2b 0.8.0, unchanged, against a real `tupper serve`
// with the least configuration that works (README.md): E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY in the environment, and template "base".
// Commands, processes, files written and read back, and a reconnect by
// Mastra's id. (Its stop() and start(): mastra-e2b-lifecycle.test.mjs.)
//
// Needs a running `tupper serve`: TUPPER_API_URL and TUPPER_API_KEY, which
// this file exports as the E2B_* variables, as a user's shell would.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

for (const v of ["TUPPER_API_URL", "TUPPER_API_KEY"]) {
  if (!process.env[v]) throw new Error(`${v} is not set`);
}
process.env.E2B_API_URL = process.env.TUPPER_API_URL;
process.env.E2B_SANDBOX_URL = process.env.TUPPER_API_URL;
process.env.E2B_API_KEY = process.env.TUPPER_API_KEY;

const { Workspace } = await import("@mastra/core/workspace");
const { E2BSandbox } = await import("@mastra/e2b");
const { NotFoundError, Sandbox } = await import("e2b");

let sandbox;

before(async () => {
  sandbox = new E2BSandbox({ template: "base" });
  await new Workspace({ sandbox }).init();
});

after(async () => {
  await sandbox?._destroy();
});

test("@mastra/e2b runs commands in a Tupper sandbox", async () => {
  assert.equal(sandbox.status, "running");
  const res = await sandbox.executeCommand("echo", ["hello", "from e2b"]);
  assert.equal(res.stdout, "hello from e2b\n");
  assert.equal(res.exitCode, 0);
  const bad = await sandbox.executeCommand("exit 5");
  assert.equal(bad.exitCode, 5);
});

test("@mastra/e2b spawns processes", async () => {
  const h = await sandbox.processes.spawn("for i in 1 2; do echo n$i; done");
  const res = await h.wait();
  assert.equal(res.exitCode, 0);
  assert.equal(res.stdout, "n1\nn2\n");
});

test("@mastra/e2b writes files and reads them back", async () => {
  await sandbox.writeFiles([{ path: "/home/user/e2b/notes.txt", content: "written by @mastra/e2b\n" }]);
  assert.equal((await sandbox.executeCommand("cat /home/user/e2b/notes.txt")).stdout, "written by @mastra/e2b\n");
  await sandbox.e2b.files.write("/home/user/e2b/direct.txt", "through the SDK");
  assert.equal(await sandbox.e2b.files.read("/home/user/e2b/direct.txt"), "through the SDK");
});

test("@mastra/e2b reconnects to the same sandbox by Mastra's id, and destroy kills it", async () => {
  const id = sandbox.e2b.sandboxId;
  const again = new E2BSandbox({ id: sandbox.id, template: "base" });
  await again._start();
  assert.equal(again.e2b.sandboxId, id);
  assert.equal((await again.executeCommand("cat /home/user/e2b/notes.txt")).stdout, "written by @mastra/e2b\n");
  await again._destroy();
  await assert.rejects(Sandbox.getInfo(id), NotFoundError);
  sandbox = undefined;
});
