// A whole deepagents agent loop on a Tupper sandbox: a scripted chat model
// (LangChain's fakeModel; no LLM is reachable in CI) makes the agent write,
// read, edit, execute, ls, glob and grep, and the test checks what the
// tools answered and what is really in the sandbox afterwards.
//
// Needs a running `tupper serve`: TUPPER_API_URL and TUPPER_API_KEY.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { createDeepAgent } from "deepagents";
import { Sandbox } from "e2b";

import { TupperSandbox, resolveConnection } from "../dist/index.js";

const DIR = "/home/user/proj";

let backend;

before(async () => {
  backend = await TupperSandbox.create({ metadata: { test: "deepagents-agent" } });
});

after(async () => {
  await backend?.close();
});

test("a deepagents agent writes, reads, edits, executes, lists, globs and greps in a Tupper sandbox", async () => {
  const model = fakeModel()
    .respondWithTools([
      {
        name: "write_file",
        args: { file_path: `${DIR}/hello.py`, content: "print('hello from tupper')\nANSWER = 6 * 7\n" },
        id: "call_write",
      },
      { name: "write_file", args: { file_path: `${DIR}/docs/notes.md`, content: "# notes\nTODO: tupper-marker here\n" }, id: "call_notes" },
    ])
    .respondWithTools([{ name: "read_file", args: { file_path: `${DIR}/hello.py` }, id: "call_read" }])
    .respondWithTools([
      {
        name: "edit_file",
        args: { file_path: `${DIR}/hello.py`, old_string: "hello from tupper", new_string: "hello from deepagents" },
        id: "call_edit",
      },
    ])
    .respondWithTools([
      { name: "execute", args: { command: `python3 ${DIR}/hello.py && python3 -c 'import sys; sys.path.insert(0, "${DIR}"); import hello; print("answer", hello.ANSWER)'` }, id: "call_exec" },
    ])
    .respondWithTools([{ name: "execute", args: { command: "echo to-stderr >&2; exit 3" }, id: "call_fail" }])
    .respondWithTools([{ name: "ls", args: { path: DIR }, id: "call_ls" }])
    .respondWithTools([{ name: "glob", args: { pattern: "**/*.md", path: DIR }, id: "call_glob" }])
    .respondWithTools([{ name: "grep", args: { pattern: "tupper-marker", path: DIR }, id: "call_grep" }])
    .respond(new AIMessage("All done."));

  const agent = createDeepAgent({ model, backend });
  const result = await agent.invoke(
    { messages: [new HumanMessage("Make hello.py greet from deepagents and run it.")] },
    { recursionLimit: 50 },
  );

  const tool = toolOutputs(result.messages);
  assert.match(tool.call_write, /Successfully wrote to '\/home\/user\/proj\/hello\.py'/);
  assert.match(tool.call_notes, /Successfully wrote/);
  assert.match(tool.call_read, /hello from tupper/);
  assert.match(tool.call_edit, /Successfully replaced 1 occurrence/);
  assert.match(tool.call_exec, /hello from deepagents\nanswer 42\n/);
  assert.match(tool.call_exec, /exit code 0/);
  assert.match(tool.call_fail, /to-stderr/);
  assert.match(tool.call_fail, /failed with exit code 3/);
  assert.match(tool.call_ls, /\/home\/user\/proj\/hello\.py/);
  assert.match(tool.call_ls, /\/home\/user\/proj\/docs\/? \(directory\)/);
  assert.match(tool.call_glob, /notes\.md/);
  assert.doesNotMatch(tool.call_glob, /hello\.py/);
  assert.match(tool.call_grep, /\/home\/user\/proj\/docs\/notes\.md/);
  assert.match(tool.call_grep, /tupper-marker/);
  assert.equal(result.messages.at(-1).content, "All done.");
  assert.equal(model.callCount, 9);

  // The effects are real: another client of the same daemon sees them.
  const other = await Sandbox.connect(backend.id, resolveConnection());
  assert.equal(await other.files.read(`${DIR}/hello.py`), "print('hello from deepagents')\nANSWER = 6 * 7\n");
  assert.equal(await other.files.read(`${DIR}/docs/notes.md`), "# notes\nTODO: tupper-marker here\n");
});

// toolOutputs maps each tool call's id to the text its ToolMessage carried.
function toolOutputs(messages) {
  const out = {};
  for (const m of messages) {
    if (!ToolMessage.isInstance(m)) continue;
    out[m.tool_call_id] = typeof m.content === "string" ? m.content : m.content.map((c) => c.text ?? "").join("");
  }
  return out;
}
