// @tupper/mastra: Mastra workspace sandbox and filesystem on Tupper.

export { TupperSandbox, type TupperSandboxOptions } from "./sandbox.js";
export { TupperProcessManager } from "./process-manager.js";
export { DEFAULT_API_URL, resolveConnection, type ResolvedConnection, type TupperConnectionOptions } from "./config.js";
export { TupperFilesystem, type TupperFilesystemOptions } from "./filesystem.js";
