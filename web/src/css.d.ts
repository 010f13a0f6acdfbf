// esbuild bundles imported style sheets into app.css.
declare module '*.css'
