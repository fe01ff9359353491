/**
 * The relay agent a netns run starts inside a member namespace (`ip netns exec NS node relay-main.js LISTEN TARGET
 * …`): one {@link startRelay} per pair of endpoints (`unix:/path`, `tcp:host:port`), then the line `relay ready`.
 * It runs until killed (the run's cleanup kills it with the namespace's other processes).
 */
import { parseEndpoint, startRelay } from './relay.js';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.length === 0 || args.length % 2 !== 0)
    throw new RangeError('usage: relay-main LISTEN TARGET [LISTEN TARGET …]');
  for (let i = 0; i < args.length; i += 2)
    await startRelay(parseEndpoint(args[i] as string), parseEndpoint(args[i + 1] as string));
  process.stdout.write('relay ready\n');
}

main().catch((e: unknown) => {
  process.stderr.write(`relay: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
