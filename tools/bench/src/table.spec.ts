import { formatCount, formatNanoseconds, formatShare, formatTable } from './table.js';

describe('formatTable', () => {
  it('aligns each column to its widest cell, numbers on the right', () => {
    const text = formatTable(
      [{ header: 'implementation' }, { header: 'IDs/s', align: 'right' }],
      [
        ['idgen', '4,096,000'],
        ['peer', '12'],
      ],
    );
    expect(text).toBe(
      'implementation      IDs/s\n' +
        '--------------  ---------\n' +
        'idgen           4,096,000\n' +
        'peer                   12\n',
    );
  });

  it('prints the header and rule for no rows', () => {
    expect(formatTable([{ header: 'a' }, { header: 'bb' }], [])).toBe('a  bb\n-  --\n');
  });

  it('rejects a row whose cells do not match the columns', () => {
    expect(() => formatTable([{ header: 'a' }, { header: 'b' }], [['only one']])).toThrow(
      'row 0 has 1 cells, the table has 2 columns',
    );
  });
});

describe('number formats', () => {
  it.each([
    [0, '0'],
    [999, '999'],
    [4096000, '4,096,000'],
    [1234567.6, '1,234,568'],
    [-1000, '-1,000'],
  ])('formatCount(%d) = %s', (value, expected) => {
    expect(formatCount(value)).toBe(expected);
  });

  it('formats shares of a whole with one decimal', () => {
    expect(formatShare(3891200, 4096000)).toBe('95.0%');
    expect(formatShare(8192000, 4096000)).toBe('200.0%');
    expect(formatShare(1, 0)).toBe('n/a');
  });

  it.each([
    [850, '850 ns'],
    [49.64, '49.6 ns'],
    [12.5, '12.5 ns'],
    [1530, '1.53 µs'],
    [2_400_000, '2.40 ms'],
    [3_000_000_000, '3.00 s'],
  ])('formatNanoseconds(%d) = %s', (ns, expected) => {
    expect(formatNanoseconds(ns)).toBe(expected);
  });
});
