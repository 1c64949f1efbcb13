export const UNSAFE = Symbol.for('stampede-guard.unsafe');
export interface UnsafeSwitches { unfencedWrites?: boolean; incoherentL1?: boolean }
