// @tupper/deepagents: a Tupper sandbox as LangChain deepagents' backend.

export { TupperSandbox, type TupperSandboxCreateOptions, type TupperSandboxOptions } from "./sandbox.js";
export { DEFAULT_API_URL, resolveConnection, type ResolvedConnection, type TupperConnectionOptions } from "./config.js";
