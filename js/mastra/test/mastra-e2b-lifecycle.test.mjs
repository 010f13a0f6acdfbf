// The published @mastra/e2b 0.8.0, unchanged, with no template option at
// all: it looks up its default template (base with s3fs and fuse, named
// mastra-<hash>), builds it through E2B's template API when missing, and
// starts its sandboxes from it with onTimeout "pause". Its stop() pauses
// the sandbox and its start() resumes it with the files intact.
//
// Needs a running `tupper serve`: TUPPER_API_URL and TUPPER_API_KEY, which
// this file exports as the E2B_* variables, as a user's shell would.

import assert from "node:assert/strict";
import { test } from "node:test";

for (const v of ["TUPPER_API_URL", "TUPPER_API_KEY"]) {
  if (!process.env[v]) throw new Error(`${v} is not set`);
}
process.env.E2B_API_URL = process.env.TUPPER_API_URL;
process.env.E2B_SANDBOX_URL = process.env.TUPPER_API_URL;
process.env.E2B_API_KEY = process.env.TUPPER_API_KEY;

const { E2BSandbox } = await import("@mastra/e2b");
const { Sandbox, Template } = await import("e2b");

test("@mastra/e2b builds its default template, stop() pauses and start() resumes", async () => {
  const sandbox = new E2BSandbox();
  try {
    await sandbox._start();
    assert.equal(sandbox.status, "running");
    // The sandbox runs on Mastra's own template, which now exists.
    const info = await Sandbox.getInfo(sandbox.e2b.sandboxId);
    const template = await fetch(`${process.env.E2B_API_URL}/templates/${info.templateId}`, {
      headers: { "X-API-Key": process.env.E2B_API_KEY },
    }).then((r) => r.json());
    assert.ok(template.aliases.some((a) => a.startsWith("mastra-")), `sandbox runs on ${info.templateId}: ${JSON.stringify(template)}`);
    assert.equal((await sandbox.executeCommand("command -v s3fs")).exitCode, 0);

    await sandbox.writeFiles([{ path: "/home/user/kept.txt", content: "kept across the pause\n" }]);
    const id = sandbox.e2b.sandboxId;
    await sandbox._stop();
    assert.equal((await Sandbox.getInfo(id)).state, "paused");

    await sandbox._start();
    assert.equal(sandbox.e2b.sandboxId, id, "start() made a new sandbox instead of resuming");
    assert.equal((await Sandbox.getInfo(id)).state, "running");
    assert.equal((await sandbox.executeCommand("cat /home/user/kept.txt")).stdout, "kept across the pause\n");

    // The next Mastra sandbox finds the template built.
    assert.ok(await Template.exists(template.aliases.find((a) => a.startsWith("mastra-"))));
  } finally {
    await sandbox._destroy();
  }
});
