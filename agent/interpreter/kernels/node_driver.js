// Tupper's JavaScript and TypeScript kernel, started by the code interpreter
// (package agent/interpreter), one per context: node runs it with the
// context's language as its argument.
//
// Cells run in one vm context, so what a cell declares stays for the next.
// Commands arrive as JSON lines on stdin ({"op":"execute","code","env"});
// events leave as JSON lines on descriptor 3 (see kernel.go). What the cell
// prints through console or process.stdout/stderr leaves as stream events,
// in order with the rest; SIGINT interrupts the running cell.
'use strict';

const fs = require('fs');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const { Writable } = require('stream');
const { createRequire } = require('module');

const language = process.argv[2] || 'javascript'; // node node_driver.js LANGUAGE

function emit(event) {
  fs.writeSync(3, JSON.stringify(event) + '\n');
}

// A stream event carries at most this much text: the interpreter refuses
// events past 64 MiB, and smaller ones keep output flowing.
const STREAM_CHUNK = 1 << 20;

function emitStream(name, text) {
  for (let i = 0; i < text.length; i += STREAM_CHUNK) {
    emit({ ev: 'stream', name, text: text.slice(i, i + STREAM_CHUNK) });
  }
}

function toText(chunk) {
  if (typeof chunk === 'string') return chunk;
  return Buffer.from(chunk).toString('utf8');
}

// Output of the cell goes out as events, so it keeps its place among them.
for (const name of ['stdout', 'stderr']) {
  process[name].write = (chunk, encoding, callback) => {
    emitStream(name, toText(chunk));
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (typeof cb === 'function') process.nextTick(cb);
    return true;
  };
}
function sink(name) {
  return new Writable({
    write(chunk, encoding, callback) {
      emitStream(name, toText(chunk));
      callback();
    },
  });
}
const cellConsole = new console.Console({ stdout: sink('stdout'), stderr: sink('stderr') });

// The TypeScript compiler: Debian's node-typescript, which not every node
// finds by name. It is loaded only when needed: it costs tens of megabytes.
let tsLoaded;
function typescript() {
  if (tsLoaded === undefined) {
    tsLoaded = null;
    for (const name of ['typescript', '/usr/share/nodejs/typescript', '/usr/lib/nodejs/typescript']) {
      try {
        tsLoaded = require(name);
        break;
      } catch {}
    }
  }
  return tsLoaded;
}
if (language === 'typescript' && !typescript()) {
  emit({ ev: 'fatal', message: 'cannot load the TypeScript compiler: the image needs node-typescript' });
  process.exit(2);
}
let transpile = (code) => code;
if (language === 'typescript') {
  const ts = typescript();
  transpile = (code) =>
    ts.transpileModule(code, {
      compilerOptions: { target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.CommonJS, esModuleInterop: true },
    }).outputText;
}

const cwd = process.cwd();
const cellModule = { exports: {} };
const globals = {
  console: cellConsole,
  require: createRequire(cwd + '/'),
  module: cellModule,
  exports: cellModule.exports,
  __filename: cwd + '/[cell]',
  __dirname: cwd,
  process,
  Buffer,
  URL,
  URLSearchParams,
  TextEncoder,
  TextDecoder,
  AbortController,
  setTimeout,
  setInterval,
  setImmediate,
  clearTimeout,
  clearInterval,
  clearImmediate,
  queueMicrotask,
  structuredClone,
};
for (const name of ['fetch', 'Headers', 'Request', 'Response', 'FormData', 'Blob', 'performance', 'crypto']) {
  if (globalThis[name] !== undefined) globals[name] = globalThis[name];
}
const context = vm.createContext(globals);

// A rejection or exception that outlives its cell is reported, not fatal.
process.on('uncaughtException', (e) => emit({ ev: 'stream', name: 'stderr', text: describe(e).traceback + '\n' }));
process.on('unhandledRejection', (e) => emit({ ev: 'stream', name: 'stderr', text: 'Unhandled rejection: ' + describe(e).traceback + '\n' }));

function describe(e) {
  if (e && typeof e === 'object' && 'message' in e) {
    return { name: String(e.name || 'Error'), value: String(e.message), traceback: String(e.stack || e.message) };
  }
  return { name: 'Error', value: String(e), traceback: String(e) };
}

// An await outside a function is not a script: such a cell runs as the
// body of an async function (its declarations stay local to it), which
// returns the cell's last expression.
function needsAsync(e) {
  return e && e.name === 'SyntaxError' && /await/.test(String(e.message));
}

function asyncBody(source) {
  const ts = typescript();
  if (ts) {
    const file = ts.createSourceFile('cell.js', source, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
    const last = file.statements[file.statements.length - 1];
    if (last && ts.isExpressionStatement(last)) {
      const start = last.getStart(file);
      const expr = source.slice(start, last.getEnd()).replace(/;\s*$/, '');
      return source.slice(0, start) + 'return (' + expr + '\n);' + source.slice(last.getEnd());
    }
  }
  return source;
}

let interruptPending = null;
process.on('SIGINT', () => {
  if (interruptPending) interruptPending(new Error('the cell was interrupted'));
});

async function run(code) {
  const source = transpile(code);
  let value;
  try {
    value = new vm.Script(source, { filename: 'cell.' + (language === 'typescript' ? 'ts' : 'js') }).runInContext(context, {
      breakOnSigint: true,
    });
  } catch (e) {
    if (!needsAsync(e)) throw e;
    value = new vm.Script('(async () => {\n' + asyncBody(source) + '\n})()', { filename: 'cell' }).runInContext(context, {
      breakOnSigint: true,
    });
  }
  if (value && typeof value.then === 'function') {
    value = await new Promise((resolve, reject) => {
      interruptPending = reject;
      value.then(resolve, reject);
    }).finally(() => {
      interruptPending = null;
    });
  }
  return value;
}

let count = 0;
const queue = [];
let busy = false;

async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length > 0) {
    const cmd = queue.shift();
    const saved = {};
    const env = cmd.env || {};
    for (const k of Object.keys(env)) {
      saved[k] = process.env[k];
      process.env[k] = String(env[k]);
    }
    emit({ ev: 'count', n: ++count });
    try {
      const value = await run(String(cmd.code || ''));
      if (value !== undefined) {
        emit({ ev: 'result', main: true, data: { 'text/plain': util.inspect(value, { depth: 4, breakLength: 100 }) } });
      }
    } catch (e) {
      const d = describe(e);
      if (/interrupted/.test(d.value)) d.name = 'KeyboardInterrupt';
      emit({ ev: 'error', ...d });
    } finally {
      for (const k of Object.keys(saved)) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
    emit({ ev: 'done' });
  }
  busy = false;
}

const input = readline.createInterface({ input: process.stdin });
input.on('line', (line) => {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch {
    return;
  }
  if (cmd.op === 'execute') {
    queue.push(cmd);
    pump();
  }
});
input.on('close', () => process.exit(0));
emit({ ev: 'ready' });
