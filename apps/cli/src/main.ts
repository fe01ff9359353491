import { runCli } from './cli.js';

runCli(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
}).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`idgen: ${(e as Error).message}\n`);
    process.exitCode = 1;
  },
);
