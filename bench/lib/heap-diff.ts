/**
 * What a heap grew by, between two V8 heap snapshots (`v8.writeHeapSnapshot`), by kind of object:
 * objects by constructor name, closures by function name, the rest by V8's node type ("array" is
 * the backing store of Maps, Sets, arrays and suspended async functions' registers). Self sizes
 * only, so the totals are the reachable objects' own bytes (after the GC a snapshot runs).
 */
import { readFileSync } from 'node:fs';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

export interface HeapGrowth {
  kind: string;
  count: number;
  bytes: number;
}

function byKind(file: string): Map<string, { count: number; bytes: number }> {
  const s = JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
  const fields = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const [width, type, name, size] = [fields.length, fields.indexOf('type'), fields.indexOf('name'), fields.indexOf('self_size')];
  const out = new Map<string, { count: number; bytes: number }>();
  for (let i = 0; i < s.nodes.length; i += width) {
    const t = types[s.nodes[i + type] ?? 0] ?? '?';
    const n = s.strings[s.nodes[i + name] ?? 0] ?? '';
    const kind = t === 'object' || t === 'native' ? n : t === 'closure' ? `closure ${n || '(anonymous)'}` : t;
    const e = out.get(kind) ?? { count: 0, bytes: 0 };
    e.count++;
    e.bytes += s.nodes[i + size] ?? 0;
    out.set(kind, e);
  }
  return out;
}

/** Growth from `before` to `after`, per `per` (e.g. per waiter), largest first. */
export function heapGrowth(before: string, after: string, per: number): HeapGrowth[] {
  const a = byKind(before);
  const rows: HeapGrowth[] = [];
  for (const [kind, { count, bytes }] of byKind(after)) {
    const b = a.get(kind) ?? { count: 0, bytes: 0 };
    rows.push({ kind, count: (count - b.count) / per, bytes: (bytes - b.bytes) / per });
  }
  return rows.sort((x, y) => y.bytes - x.bytes);
}
