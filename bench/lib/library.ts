/**
 * The library as its users run it: the compiled `dist/` (`npm run build`; `npm run bench` and
 * `npm run bench:hit` build first), not `src/` through tsx. tsx compiles with esbuild's keepNames,
 * which wraps every closure the library creates per call in an `Object.defineProperty` of its name:
 * measured on a fresh hit (1 process × 10 loops, 20 keys), that alone added about a third to the
 * client CPU per request. `SG_BENCH_SOURCE=1` measures `src/` instead (no build needed).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

type Library = typeof import('../../src/index.js');

const DIST = new URL('../../dist/index.js', import.meta.url);

/**
 * Another build of the library, for an A/B run in one bench (bench:hit's `ours-base` variant): the path
 * of its `index.js` in SG_BENCH_BASE, e.g. a worktree of the base commit, built there.
 */
export async function baseLibrary(): Promise<Library> {
  const base = process.env.SG_BENCH_BASE;
  if (base === undefined || !existsSync(base)) throw new Error(`SG_BENCH_BASE must name another build's index.js (got ${String(base)})`);
  return (await import(pathToFileURL(base).href)) as Library;
}

export async function library(): Promise<{ lib: Library; from: 'dist' | 'src' }> {
  if (process.env.SG_BENCH_SOURCE !== '1') {
    if (!existsSync(fileURLToPath(DIST))) throw new Error('dist/ is missing: run `npm run build` first (or set SG_BENCH_SOURCE=1 to measure src/ through tsx)');
    return { lib: (await import(DIST.href)) as Library, from: 'dist' };
  }
  return { lib: await import('../../src/index.js'), from: 'src' };
}
