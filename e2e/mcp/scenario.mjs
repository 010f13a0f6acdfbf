// Drives Tupper's MCP server as MCP clients do, with the pinned MCP
// Inspector CLI and the pinned TypeScript SDK's Client: tools/list (the
// inspector's --strict schema check must find nothing), then an agent's
// scenario and its error cases. e2e/mcp_test.go runs it:
//
//   node scenario.mjs stdio   # TUPPER_BIN, MCP_ROOT, MCP_IMAGE_ROOT, MCP_TEMPLATE
//   node scenario.mjs http    # MCP_URL, MCP_KEY, MCP_OTHER_KEY
//
// Each step prints "--- step"; a failure prints "FAIL: …" and exits 1.

import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const mode = process.argv[2];
if (mode !== "stdio" && mode !== "http") {
  console.error("usage: node scenario.mjs stdio|http");
  process.exit(2);
}

const wantTools = [
  "command_output", "create_sandbox", "delete_snapshot", "fork_sandbox", "kill_command", "kill_sandbox",
  "list_files", "list_sandboxes", "make_dir", "pause_sandbox", "read_file", "remove_path", "resume_sandbox",
  "run_code", "run_command", "send_stdin", "snapshot_sandbox", "write_file",
];

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

const step = (name) => console.log(`--- ${name}`);

// The inspector's target: the `tupper mcp` command line, or the URL and key.
function inspectorTarget(key) {
  if (mode === "stdio") {
    return [env("TUPPER_BIN"), "mcp", "--local", "--root", env("MCP_ROOT"),
      "--image-root", env("MCP_IMAGE_ROOT"), "--default-template", env("MCP_TEMPLATE")];
  }
  return ["--transport", "http", "--server-url", env("MCP_URL"), "--header", `X-API-KEY: ${key ?? env("MCP_KEY")}`];
}

const require = createRequire(import.meta.url);
const inspectorBin = path.join(path.dirname(require.resolve("@modelcontextprotocol/inspector/package.json")),
  "clients", "launcher", "build", "index.js");

// inspector runs the inspector's CLI mode; the target comes last, since
// some of its options take several values.
function inspector(args, key) {
  const r = spawnSync(process.execPath, [inspectorBin, "--cli", ...args, ...inspectorTarget(key)], {
    encoding: "utf8", timeout: 120_000, // Keep the inspector's catalog and state out of the real home.
    env: { ...process.env, HOME: env("MCP_SCRATCH"), MCP_CATALOG_PATH: path.join(env("MCP_SCRATCH"), "catalog.json") },
  });
  if (r.error) throw r.error;
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

async function inspectorChecks() {
  step("inspector: tools/list --strict");
  let r = inspector(["--method", "tools/list", "--strict"]);
  assert.equal(r.code, 0, `inspector tools/list --strict exited ${r.code}:\n${r.stderr}`);
  // With --strict, each finding prints "Error: tool …" or "Warning: tool …"
  // and a count; a clean server prints none of it.
  assert.doesNotMatch(r.stderr, /Warning|Error|error|warning/, `the inspector reported schema findings:\n${r.stderr}`);
  const listed = JSON.parse(r.stdout);
  assert.deepEqual(listed.tools.map((t) => t.name).sort(), wantTools);
  for (const t of listed.tools) {
    assert.ok(t.outputSchema, `tool ${t.name} has no outputSchema`);
  }

  step("inspector: tools/call list_sandboxes");
  r = inspector(["--method", "tools/call", "--tool-name", "list_sandboxes", "--tool-args-json", "{}"]);
  assert.equal(r.code, 0, `inspector list_sandboxes exited ${r.code}:\n${r.stderr}`);
  assert.ok(Array.isArray(JSON.parse(r.stdout).structuredContent.sandboxes));

  step("inspector: error results");
  r = inspector(["--method", "tools/call", "--tool-name", "kill_sandbox", "--tool-args-json", '{"sandbox":"nope"}']);
  assert.notEqual(r.code, 0, "killing an unknown sandbox succeeded");
  assert.match(r.stdout, /not found: call list_sandboxes/);
  r = inspector(["--method", "tools/call", "--tool-name", "format_disk", "--tool-args-json", "{}"]);
  assert.notEqual(r.code, 0, "an unknown tool succeeded");
  assert.match(r.stdout + r.stderr, /format_disk/);

  if (mode === "http") {
    step("inspector: a wrong key is refused");
    r = inspector(["--method", "tools/list", "--stored-auth-only", "--connect-timeout", "20000"], "e2b_0000000000000000000000000000000000000000");
    assert.notEqual(r.code, 0, "tools/list with a wrong key succeeded");
  }
}

async function connect(key) {
  const client = new Client({ name: "tupper-e2e", version: "1.0.0" });
  let transport;
  if (mode === "stdio") {
    const [command, ...args] = inspectorTarget();
    transport = new StdioClientTransport({ command, args, stderr: "inherit" });
  } else {
    transport = new StreamableHTTPClientTransport(new URL(env("MCP_URL")), {
      requestInit: { headers: { "X-API-KEY": key ?? env("MCP_KEY") } },
    });
  }
  await client.connect(transport);
  return client;
}

const text = (res) => (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

// call calls a tool that must succeed; the SDK checks its structured output
// against the tool's outputSchema.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  if (res.isError) throw new Error(`${name}(${JSON.stringify(args)}) failed: ${text(res)}`);
  assert.ok(res.structuredContent, `${name} returned no structured content`);
  return res;
}

// callErr calls a tool that must answer an error result saying each of wants.
async function callErr(client, name, args, ...wants) {
  const res = await client.callTool({ name, arguments: args });
  assert.equal(res.isError, true, `${name}(${JSON.stringify(args)}) succeeded: ${text(res)}`);
  for (const w of wants) assert.ok(text(res).includes(w), `${name} error ${JSON.stringify(text(res))} does not say ${JSON.stringify(w)}`);
}

async function scenario() {
  step("sdk: connect and tools/list");
  const client = await connect();
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), wantTools);

  step("sdk: create_sandbox");
  let res = await call(client, "create_sandbox", { env: { GREETING: "hi" }, metadata: { suite: "e2e-mcp" } });
  const id = res.structuredContent.sandbox.sandbox_id;
  assert.ok(id, "no sandbox id");
  const sb = (more) => ({ sandbox: id, ...more });

  step("sdk: write and run a Python program, read its output file");
  const prog = "import os\nopen('out.txt', 'w').write('answer=%d\\n' % (6*7))\nprint(os.environ['GREETING'], 'from python')\n";
  await call(client, "write_file", sb({ path: "app/hello.py", content: prog }));
  res = await call(client, "run_command", sb({ command: "cd app && python3 hello.py" }));
  assert.equal(res.structuredContent.exit_code, 0);
  assert.equal(res.structuredContent.stdout, "hi from python\n");
  res = await call(client, "read_file", sb({ path: "/home/user/app/out.txt" }));
  assert.equal(res.structuredContent.content, "answer=42\n");
  res = await call(client, "list_files", sb({ path: "app" }));
  assert.deepEqual(res.structuredContent.entries.map((e) => e.name), ["hello.py", "out.txt"]);

  step("sdk: background command, poll, stdin, kill");
  res = await call(client, "run_command", sb({ command: "echo ready; read line; echo got $line; exit 3", background: true }));
  const pid = res.structuredContent.pid;
  assert.ok(pid > 0);
  let out;
  for (let i = 0; i < 100; i++) {
    out = (await call(client, "command_output", sb({ pid }))).structuredContent;
    if (out.stdout === "ready\n") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(out.stdout, "ready\n");
  assert.equal(out.running, true);
  await call(client, "send_stdin", sb({ pid, data: "hello\n" }));
  out = (await call(client, "command_output", sb({ pid, stdout_offset: out.next_stdout_offset, wait_seconds: 20 }))).structuredContent;
  assert.equal(out.running, false);
  assert.equal(out.exit_code, 3);
  assert.equal(out.stdout, "got hello\n");
  res = await call(client, "run_command", sb({ command: "sleep 600", background: true }));
  res = await call(client, "kill_command", sb({ pid: res.structuredContent.pid }));
  assert.equal(res.structuredContent.killed, true);

  step("sdk: run_code");
  res = await call(client, "run_code", sb({ language: "python", code: "print(sum(range(10)))" }));
  assert.equal(res.structuredContent.stdout, "45\n");
  res = await call(client, "run_code", sb({ language: "python", code: "raise ValueError('boom')" }));
  assert.match(res.structuredContent.error, /ValueError: boom/);

  step("sdk: list_sandboxes");
  res = await call(client, "list_sandboxes", { metadata: { suite: "e2e-mcp" } });
  assert.deepEqual(res.structuredContent.sandboxes.map((s) => s.sandbox_id), [id]);

  step("sdk: errors");
  await callErr(client, "run_command", { sandbox: "nope", command: "true" }, "not found", "list_sandboxes");
  await callErr(client, "run_command", { command: "true" }, "sandbox");
  await callErr(client, "read_file", sb({ path: "missing.txt" }), "not found", "list_files");
  await callErr(client, "run_code", sb({ language: "cobol", code: "x" }), "language");
  await assert.rejects(client.callTool({ name: "format_disk", arguments: {} }), /format_disk/);

  if (mode === "http") {
    step("sdk: another key sees none of it");
    const other = await connect(env("MCP_OTHER_KEY"));
    res = await call(other, "list_sandboxes", {});
    assert.deepEqual(res.structuredContent.sandboxes, []);
    await callErr(other, "kill_sandbox", { sandbox: id }, "not found");
    await other.close();

    step("sdk: a wrong key is refused");
    await assert.rejects(connect("e2b_0000000000000000000000000000000000000000"));
  }

  step("sdk: kill_sandbox");
  await call(client, "kill_sandbox", { sandbox: id });
  res = await call(client, "list_sandboxes", {});
  assert.deepEqual(res.structuredContent.sandboxes, []);
  await callErr(client, "run_command", { sandbox: id, command: "true" }, "not found");
  await client.close();
}

try {
  await inspectorChecks();
  await scenario();
  console.log("--- ok");
} catch (err) {
  console.log(`FAIL: ${err.stack ?? err}`);
  process.exit(1);
}
