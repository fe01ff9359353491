import { execFile } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** The vendored h2spec (tools/h2spec/README.md), or `$H2SPEC`. */
export function h2specBinary(): string {
  const path = process.env['H2SPEC'] ?? resolve(__dirname, '..', '..', 'h2spec', 'h2spec');
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new Error(
      `h2spec not found (or not executable) at ${path}: it is vendored in tools/h2spec/ (see its README: h2spec 2.6.0, ` +
        'github.com/summerwind/h2spec at af83a65f, built with Go); restore it there or set H2SPEC to a built h2spec',
    );
  }
  return path;
}

/** One h2spec run: every case, the ones that failed (id and what h2spec expected and saw), the ones skipped. */
export interface H2specResult {
  readonly total: number;
  /** `id`: `<section> <case>`, e.g. `http2/3.5 Sends invalid connection preface`. */
  readonly failed: { readonly id: string; readonly detail: string }[];
  readonly skipped: string[];
}

/**
 * Runs h2spec against `127.0.0.1:port` with `path` as every request's `:path` (its cases send GET), all cases
 * or `cases` (e.g. `http2/5.1`), `--strict` when asked, over TLS (`-t -k`: ALPN h2, any certificate) when asked,
 * and reads its JUnit report.
 */
export async function runH2spec(
  port: number,
  path: string,
  options: { strict?: boolean; tls?: boolean; cases?: string[] } = {},
): Promise<H2specResult> {
  const dir = mkdtempSync(join(tmpdir(), 'h2spec-'));
  try {
    const report = join(dir, 'report.xml');
    const args = [
      '-h',
      '127.0.0.1',
      '-p',
      String(port),
      '-P',
      path,
      '-o',
      '5',
      '-j',
      report,
      ...(options.strict === true ? ['--strict'] : []),
      ...(options.tls === true ? ['-t', '-k'] : []),
      ...(options.cases ?? []),
    ];
    const exit = await new Promise<{ code: number; output: string }>((done) => {
      execFile(h2specBinary(), args, { timeout: 240_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
        done({ code, output: stdout + stderr });
      });
    });
    let xml: string;
    try {
      xml = readFileSync(report, 'latin1');
    } catch {
      throw new Error(`h2spec wrote no report (exit ${exit.code}):\n${exit.output.slice(-2000)}`);
    }
    const failed: { id: string; detail: string }[] = [];
    const skipped: string[] = [];
    let total = 0;
    const testcase = /<testcase package="([^"]*)" classname="([^"]*)"[^>]*?(\/>|>([\s\S]*?)<\/testcase>)/g;
    for (let m = testcase.exec(xml); m !== null; m = testcase.exec(xml)) {
      total++;
      const body = m[4] ?? '';
      const id = `${m[1]} ${m[2]}`;
      if (/<(error|failure)/.test(body))
        failed.push({
          id,
          detail: body
            .replace(/<[^>]+>/g, ' ')
            .replace(/\s+/g, ' ')
            .trim(),
        });
      else if (/<skipped/.test(body)) skipped.push(id);
    }
    if (total === 0 || (exit.code !== 0 && failed.length === 0)) {
      throw new Error(
        `h2spec exited ${exit.code} with ${total} cases read from its report:\n${exit.output.slice(-2000)}`,
      );
    }
    return { total, failed, skipped };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
