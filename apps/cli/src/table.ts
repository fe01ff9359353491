/**
 * Renders rows as a plain-text table for people: a header line, then one line a row, columns left-aligned
 * and separated by two spaces; trailing spaces trimmed. Empty cells show `-`.
 */
export function renderTable(headers: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const cells = rows.map((r) => headers.map((_, i) => (r[i] === undefined || r[i] === '' ? '-' : (r[i] as string))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] as string).length)));
  const line = (r: readonly string[]): string =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)];
}

/** `1234` → `1.2s`, `-300` → `-0.3s`: a duration in seconds with one decimal. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

/** Unix ms → ISO-8601, or `-` for none. */
export function isoTime(ms: number | undefined): string {
  return ms === undefined || !Number.isFinite(ms) || ms <= 0 ? '-' : new Date(ms).toISOString();
}
