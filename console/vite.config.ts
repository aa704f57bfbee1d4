import { defineConfig } from 'vite'

// Served by the service under /console (src/console/): hashed file names under assets/ are cached
// for good, index.html never. Preact's JSX through oxc's automatic runtime: no plugin needed.
export default defineConfig({
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist', emptyOutDir: true, assetsInlineLimit: 0, target: 'es2022' },
  server: { fs: { allow: ['..'] } },
})
