// resolveConnection, the one js/shared/config.ts, as each package under js/
// builds and exports it. A package's `npm test` runs this file from the
// package's directory, so it tests that package's dist/; it needs no
// daemon.

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { describe, test } from "node:test";
import { pathToFileURL } from "node:url";

const { DEFAULT_API_URL, resolveConnection } = await import(pathToFileURL(resolve("dist/index.js")).href);

describe("resolveConnection", () => {
  const cases = [
    {
      name: "explicit options win over the environment and serve both planes",
      opts: { apiUrl: "http://10.0.0.1:3000/", apiKey: "e2b_opt" },
      env: { TUPPER_API_URL: "http://a:1", TUPPER_SANDBOX_URL: "http://b:2", TUPPER_API_KEY: "e2b_env" },
      want: { apiUrl: "http://10.0.0.1:3000", sandboxUrl: "http://10.0.0.1:3000", apiKey: "e2b_opt" },
    },
    {
      name: "TUPPER_ variables",
      opts: {},
      env: { TUPPER_API_URL: "http://a:1", TUPPER_API_KEY: "e2b_t", E2B_API_URL: "http://e:9", E2B_SANDBOX_URL: "http://f:9" },
      want: { apiUrl: "http://a:1", sandboxUrl: "http://a:1", apiKey: "e2b_t" },
    },
    {
      name: "TUPPER_SANDBOX_URL beside TUPPER_API_URL",
      opts: {},
      env: { TUPPER_API_URL: "http://a:1", TUPPER_SANDBOX_URL: "http://b:2", TUPPER_API_KEY: "e2b_t" },
      want: { apiUrl: "http://a:1", sandboxUrl: "http://b:2", apiKey: "e2b_t" },
    },
    {
      name: "E2B_ variables when no TUPPER_ ones",
      opts: {},
      env: { E2B_API_URL: "http://e:9", E2B_SANDBOX_URL: "http://f:9", E2B_API_KEY: "e2b_e" },
      want: { apiUrl: "http://e:9", sandboxUrl: "http://f:9", apiKey: "e2b_e" },
    },
    {
      name: "the default address",
      opts: {},
      env: { TUPPER_API_KEY: "e2b_t" },
      want: { apiUrl: DEFAULT_API_URL, sandboxUrl: DEFAULT_API_URL, apiKey: "e2b_t" },
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      assert.deepEqual(resolveConnection(c.opts, c.env), c.want);
    });
  }

  test("no key is an error that says how to get one", () => {
    assert.throws(() => resolveConnection({}, { TUPPER_API_URL: "http://a:1" }), /TUPPER_API_KEY/);
  });

  test("a URL that is not http(s) is refused", () => {
    assert.throws(() => resolveConnection({ apiUrl: "127.0.0.1:3000", apiKey: "k" }, {}), /http\(s\)/);
  });
});
