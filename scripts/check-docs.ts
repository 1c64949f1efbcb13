/**
 * Docs that cannot drift: `npm run check:docs` (also run by .ci/run before `npm test`).
 *
 * 1. Every ```ts block of README.md and docs/*.md is type-checked as a consumer's own module would be:
 *    each block is written to a file of its own (so each compiles as its own ES module, top-level
 *    await allowed) and all of them are compiled in one program with the repository's TypeScript,
 *    strict, with `stampede-guard` mapped to src/index.ts (what the package's types are built from)
 *    and every other import (ioredis, redis, express, …) resolved from node_modules.
 *
 *    Convention for names a snippet uses without defining them: the ambient declarations in
 *    PREAMBLE below (`redis`, `cache`, `db`, `key`, `id`, `loader`, `log`, …). A snippet that
 *    defines one of them itself (`const redis = new Redis()`, an `import`) shadows the ambient one.
 *    Anything else a snippet needs it must import or declare. A block that is not TypeScript for
 *    a consumer (shell, output, a Lua script) is fenced as ```sh, ```text, ```lua, never ```ts.
 *
 * 2. Every relative link of README.md, CHANGELOG.md and docs/*.md points at a file that exists and,
 *    when it names an anchor (`page.md#section`, `#section`), at a heading of that page (GitHub's
 *    slug: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` … for repeats).
 *
 * Exit code 1 with file:line messages on any failure. `--keep` leaves the generated files in place.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'node_modules', '.cache', 'check-docs');

/** Ambient names every snippet may use. Keep it short: each name here is a promise about the docs. */
const PREAMBLE = `
import type { Redis as IoRedis } from 'ioredis';
import type { Cache, Loader } from 'stampede-guard';
declare global {
  /** The application's Redis client (ioredis here; the docs say where node-redis differs). */
  const redis: IoRedis;
  /** A cache made with createCache({ redis }). */
  const cache: Cache;
  /** Any key, id and loader. */
  const key: string;
  const id: string;
  const loader: Loader<unknown>;
  /** The application's logger. */
  const log: { info(...args: unknown[]): void; warn(...args: unknown[]): void; error(...args: unknown[]): void };
  /** The application's data source, every method abortable. */
  const db: {
    loadUser(id: string, options?: { signal?: AbortSignal }): Promise<{ id: string; name: string }>;
    product(id: string, options?: { signal?: AbortSignal }): Promise<{ id: string; price: number } | undefined>;
    products(ids: readonly string[], options?: { signal?: AbortSignal }): Promise<Iterable<[string, { id: string; price: number }]>>;
    report(id: string, options?: { signal?: AbortSignal }): Promise<{ id: string; total: number }>;
  };
  /** Renders a page; the kind of loader a stale window suits. */
  function renderHome(): Promise<string>;
}
export {};
`;

interface Block {
  readonly file: string; // relative to root
  readonly line: number; // 1-based line of the block's first code line
  readonly code: string;
}

function markdownFiles(): string[] {
  const docs = existsSync(join(root, 'docs')) ? readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`) : [];
  return ['README.md', 'CHANGELOG.md', ...docs.sort()].filter((f) => existsSync(join(root, f)));
}

/** Fenced blocks: ```lang … ``` (fences of 3+ backticks, closed by a fence at least as long). */
function fences(text: string): { lang: string; line: number; code: string }[] {
  const lines = text.split('\n');
  const found: { lang: string; line: number; code: string }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,})\s*([\w+-]*)/.exec(lines[i] as string);
    if (!open) continue;
    const fence = open[2] as string;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !new RegExp(`^\\s*${fence}\\s*$`).test(lines[j] as string); j++) body.push(lines[j] as string);
    found.push({ lang: (open[3] as string).toLowerCase(), line: i + 2, code: body.join('\n') });
    i = j;
  }
  return found;
}

function checkCode(blocks: readonly Block[]): string[] {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(join(out, 'preamble.ts'), PREAMBLE);
  const byFile = new Map<string, Block>();
  blocks.forEach((b, i) => {
    const name = join(out, `${b.file.replace(/[/.]/g, '_')}_${String(i).padStart(3, '0')}_L${b.line}.ts`);
    // `export {}` makes every block a module of its own, even one without import or export.
    writeFileSync(name, `${b.code}\nexport {};\n`);
    byFile.set(name, b);
  });
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2024.d.ts'],
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    esModuleInterop: true,
    types: ['node'],
    typeRoots: [join(root, 'node_modules', '@types')],
    baseUrl: root,
    paths: { 'stampede-guard': ['./src/index.ts'] },
  };
  const program = ts.createProgram([join(out, 'preamble.ts'), ...byFile.keys()], options);
  const errors: string[] = [];
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n  ');
    const block = d.file ? byFile.get(resolve(d.file.fileName)) : undefined;
    if (d.file && block && d.start !== undefined) {
      const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
      errors.push(`${block.file}:${block.line + line}:${character + 1}: TS${d.code}: ${message}`);
    } else {
      errors.push(`${d.file ? relative(root, d.file.fileName) : '(program)'}: TS${d.code}: ${message}`);
    }
  }
  return errors;
}

/** GitHub's heading anchors of a markdown text. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  let inFence = false;
  for (const line of text.split('\n')) {
    if (/^\s*```/.test(line)) inFence = !inFence;
    const h = inFence ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!h) continue;
    const base = (h[1] as string)
      .replace(/<[^>]+>/g, '')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    result.add(n === 0 ? base : `${base}-${n}`);
  }
  return result;
}

function checkLinks(files: readonly string[]): string[] {
  const errors: string[] = [];
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    const lines = text.split('\n');
    let inFence = false;
    lines.forEach((line, i) => {
      if (/^\s*```/.test(line)) inFence = !inFence;
      if (inFence) return;
      for (const m of line.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        const target = m[1] as string;
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
        const [path, anchor] = target.split('#', 2) as [string, string | undefined];
        const resolved = path === '' ? join(root, file) : resolve(dirname(join(root, file)), decodeURIComponent(path));
        const where = `${file}:${i + 1}`;
        if (!existsSync(resolved)) {
          errors.push(`${where}: link to a missing file: ${target}`);
          continue;
        }
        if (anchor !== undefined && resolved.endsWith('.md') && !anchors(readFileSync(resolved, 'utf8')).has(anchor)) {
          errors.push(`${where}: link to a missing anchor: ${target}`);
        }
      }
    });
  }
  return errors;
}

const files = markdownFiles();
const blocks: Block[] = [];
for (const file of files) {
  for (const f of fences(readFileSync(join(root, file), 'utf8'))) {
    if (f.lang === 'ts' || f.lang === 'typescript') blocks.push({ file, line: f.line, code: f.code });
  }
}
const codeErrors = checkCode(blocks);
const linkErrors = checkLinks(files);
if (!process.argv.includes('--keep')) rmSync(out, { recursive: true, force: true });
for (const e of [...codeErrors, ...linkErrors]) console.error(e);
console.log(`check:docs: ${blocks.length} ts blocks in ${files.length} files, ${codeErrors.length} type errors; ${linkErrors.length} broken links`);
if (codeErrors.length + linkErrors.length > 0) process.exit(1);
