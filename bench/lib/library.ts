/**
 * The library as its users run it: the compiled `dist/` (`npm run build`; `npm run bench` and
 * `npm run bench:hit` build first), not `src/` through tsx. tsx compiles with esbuild's keepNames,
 * which wraps every closure the library creates per call in an `Object.defineProperty` of its name:
 * measured on a fresh hit (1 process × 10 loops, 20 keys), that alone added about a third to the
 * client CPU per request. `SG_BENCH_SOURCE=1` measures `src/` instead (no build needed).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

type Library = typeof import('../../src/index.js');

const DIST = new URL('../../dist/index.js', import.meta.url);

export async function library(): Promise<{ lib: Library; from: 'dist' | 'src' }> {
  if (process.env.SG_BENCH_SOURCE !== '1') {
    if (!existsSync(fileURLToPath(DIST))) throw new Error('dist/ is missing: run `npm run build` first (or set SG_BENCH_SOURCE=1 to measure src/ through tsx)');
    return { lib: (await import(DIST.href)) as Library, from: 'dist' };
  }
  return { lib: await import('../../src/index.js'), from: 'src' };
}
