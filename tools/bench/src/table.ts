/**
 * Plain-text tables and number formats for benchmark output: what a reader compares at a glance, in a
 * terminal or pasted into a note.
 */

/** One column: its header and which side its cells line up on (numbers read best right-aligned). */
export interface Column {
  readonly header: string;
  readonly align?: 'left' | 'right';
}

/**
 * Formats `rows` under `columns` as an aligned text table with a header rule, every line ending in a
 * newline. Throws a `RangeError` when a row has a different number of cells than there are columns, so a
 * misplaced cell cannot shift a figure under the wrong header.
 */
export function formatTable(columns: readonly Column[], rows: readonly (readonly string[])[]): string {
  rows.forEach((row, index) => {
    if (row.length !== columns.length) {
      throw new RangeError(`row ${index} has ${row.length} cells, the table has ${columns.length} columns`);
    }
  });
  const widths = columns.map((column, i) =>
    Math.max(column.header.length, ...rows.map((row) => (row[i] as string).length)),
  );
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => {
        const width = widths[i] as number;
        return columns[i]?.align === 'right' ? cell.padStart(width) : cell.padEnd(width);
      })
      .join('  ')
      .trimEnd() + '\n';
  const rule = widths.map((width) => '-'.repeat(width)).join('  ') + '\n';
  return line(columns.map((column) => column.header)) + rule + rows.map(line).join('');
}

/** An integer with thousands separators: `4096000` → `4,096,000` (rounded to the nearest integer). */
export function formatCount(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const rounded = Math.round(value);
  const digits = Math.abs(rounded)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return rounded < 0 ? `-${digits}` : digits;
}

/** `part / whole` as a percentage with one decimal: `formatShare(3891200, 4096000)` → `95.0%`. */
export function formatShare(part: number, whole: number): string {
  if (whole === 0) return 'n/a';
  return `${((part / whole) * 100).toFixed(1)}%`;
}

/**
 * A duration given in nanoseconds, in the unit that keeps three significant figures readable:
 * `850` → `850 ns`, `1530` → `1.53 µs`, `2_400_000` → `2.40 ms`.
 */
export function formatNanoseconds(ns: number): string {
  const abs = Math.abs(ns);
  if (abs < 1_000) return `${Number(ns.toPrecision(3))} ns`;
  if (abs < 1_000_000) return `${(ns / 1_000).toFixed(2)} µs`;
  if (abs < 1_000_000_000) return `${(ns / 1_000_000).toFixed(2)} ms`;
  return `${(ns / 1_000_000_000).toFixed(2)} s`;
}
