// Bundles the dashboard into ../server/dashboard/dist, which the tupper
// binary embeds (package server/dashboard). Run it as `npm run build`,
// which type-checks the sources first; scripts/setup.sh does both when the
// sources or the lock file changed.
import { build } from 'esbuild'
import { copyFile, mkdir, readdir, rm, stat } from 'node:fs/promises'

const out = new URL('../server/dashboard/dist/', import.meta.url)
// The one file of dist that git keeps, so that the package builds before
// any bundle exists; dot files (.gitignore, setup.sh's stamp) stay too.
const placeholder = 'placeholder.txt'

// The e2b SDK imports node's modules, and dockerfile-ast, for its template
// builder alone, which the dashboard never calls: in the browser they are
// empty stand-ins, and anything that reaches one fails loudly.
const browserStubs = {
  name: 'browser-stubs',
  setup(b) {
    b.onResolve({ filter: /^node:/ }, (a) => ({ path: a.path, namespace: 'stub' }))
    b.onResolve({ filter: /^dockerfile-ast$/ }, (a) => ({ path: a.path, namespace: 'stub' }))
    b.onLoad({ filter: /.*/, namespace: 'stub' }, (a) => ({
      loader: 'js',
      contents: a.path === 'dockerfile-ast'
        ? `export class DockerfileParser { static parse() { throw new Error('dockerfile-ast is not in the dashboard') } }`
        : `export default new Proxy({}, { get(_, p) { throw new Error('${a.path}.' + String(p) + ' is not in the browser') } })`,
    }))
  },
}

for (const name of await readdir(out).catch(() => [])) {
  if (name !== placeholder && !name.startsWith('.')) await rm(new URL(name, out), { recursive: true })
}
await mkdir(out, { recursive: true })
await build({
  entryPoints: { app: 'src/main.ts' },
  bundle: true,
  minify: true,
  format: 'esm',
  platform: 'browser',
  target: ['chrome111', 'firefox115', 'safari16.4'],
  outdir: out.pathname,
  legalComments: 'linked',
  plugins: [browserStubs],
  logLevel: 'warning',
})
await copyFile(new URL('src/index.html', import.meta.url), new URL('index.html', out))
let total = 0
for (const name of await readdir(out)) if (!name.startsWith('.')) total += (await stat(new URL(name, out))).size
console.log(`dashboard bundle: ${(total / 1024).toFixed(0)} KiB in ${out.pathname}`)
