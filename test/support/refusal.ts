import { expect } from 'vitest';
import { InvalidOptionError } from '../../src/index.js';

/** Runs `f`, returns what it threw as an InvalidOptionError (failing the test if it threw nothing, or something else). */
export function refusal(f: () => unknown): InvalidOptionError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidOptionError);
    return e as InvalidOptionError;
  }
  throw new Error('expected an InvalidOptionError, nothing was thrown');
}
