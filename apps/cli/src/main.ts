import { runCli } from './cli.js';

/** How long the process may stay after its verb ended (closing connections) before it exits anyway. */
const EXIT_LINGER_MS = 500;

/** All of stdin, or `undefined` when it is a terminal (nothing piped in). */
async function readStdin(): Promise<string | undefined> {
  if (process.stdin.isTTY) return undefined;
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

runCli(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  readStdin,
}).then(
  (code) => {
    process.exitCode = code;
    // The verb is done and has printed its answer: a handle a library left open (grpc-js does not destroy a socket
    // whose TLS handshake is pending when its channel closes) may not keep the process alive past a short bound.
    setTimeout(() => process.exit(code), EXIT_LINGER_MS).unref();
  },
  (e: unknown) => {
    process.stderr.write(`idgen: ${(e as Error).message}\n`);
    process.exitCode = 1;
  },
);
