import { describe, expect, it } from 'vitest';
import { slotOf } from '../../src/client/slot.js';
import { entryKeys, hashSlot, slotTag } from '../../src/keys.js';

describe('hashSlot: the Cluster slot batches group keys by', () => {
  it.each([
    ['123456789', 0x31c3 % 16384], // the CRC16/XMODEM check value is 0x31c3
    ['', 0],
    ['foo', 12182], // Redis: CLUSTER KEYSLOT foo
    ['bar', 5061], // Redis: CLUSTER KEYSLOT bar
  ])('slotOf(%o) = %i', (input, slot) => {
    expect(slotOf(input)).toBe(slot);
  });


  it('is the slot of the entry’s {tag}, shared by all of its keys', () => {
    for (const key of ['a', '', 'x{y}z', '}', '{}']) {
      expect(hashSlot(key || 'e')).toBe(slotOf(slotTag(key || 'e')));
      expect(entryKeys('sg', key || 'e').value).toContain(`{${slotTag(key || 'e')}}`);
    }
  });
});
