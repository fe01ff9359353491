/** Where the CLI writes and reads; injectable so tests can read what it printed. */
export interface CliIo {
  out(line: string): void;
  err(line: string): void;
  /** All of stdin as text; `undefined` when stdin is a terminal (nothing piped in) or not given. */
  readStdin?(): Promise<string | undefined>;
}

/** What every verb gets. */
export interface VerbContext {
  readonly io: CliIo;
  /** Wall clock, Unix ms (ages of keep-alives and `last-ms` are measured against it). */
  nowMs(): number;
}
