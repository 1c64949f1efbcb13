// TEMPORARY SHIM (replaced by the locks branch).
import type { Grant } from './types.js';

export type ReleaseOutcome = 'written' | 'empty' | 'failed' | 'cancelled' | 'unstorable';

export class GrantRegistry {
  private readonly held = new Set<Grant>();
  private closed = false;
  hold(grant: Grant): boolean {
    if (this.closed) return false;
    this.held.add(grant);
    return true;
  }
  drop(grant: Grant): void {
    this.held.delete(grant);
  }
  async close(): Promise<void> {
    this.closed = true;
    while (this.held.size > 0) {
      const all = [...this.held];
      this.held.clear();
      await Promise.all(all.map((g) => g.release('cancelled')));
    }
  }
}
