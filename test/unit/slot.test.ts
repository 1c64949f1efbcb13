import { describe, expect, it } from 'vitest';
import { crc16, entryKeys, hashSlot, slotTag } from '../../src/keys.js';

describe('hashSlot: the Cluster slot batches group keys by', () => {
  it.each([
    ['123456789', 0x31c3 % 16384], // the CRC16/XMODEM check value is 0x31c3
    ['', 0],
    ['foo', 12182], // Redis: CLUSTER KEYSLOT foo
    ['bar', 5061], // Redis: CLUSTER KEYSLOT bar
  ])('crc16(%o) mod 16384 = %i', (input, slot) => {
    expect(crc16(input) % 16384).toBe(slot);
  });

  it('crc16 check value', () => {
    expect(crc16('123456789')).toBe(0x31c3);
  });

  it('is the slot of the entry’s {tag}, shared by all of its keys', () => {
    for (const key of ['a', '', 'x{y}z', '}', '{}']) {
      expect(hashSlot(key || 'e')).toBe(crc16(slotTag(key || 'e')) % 16384);
      expect(entryKeys('sg', key || 'e').value).toContain(`{${slotTag(key || 'e')}}`);
    }
  });
});
