// The readiness wait: ExecStartPost of systemd/idgen-server.service makes `systemctl start` (and `restart`) wait until the node is ready,
// by polling /readyz on its metrics side port (plain HTTP even when serving is TLS with client certificates).
// The documented equivalent of Type=notify: Node cannot send sd_notify's datagram (no AF_UNIX datagram sockets)
// and the npm package for it is a native libsystemd binding, so the unit stays Type=exec and this waits.
// Exits 0 on 200 (ready) or on 503 "waiting-for-slot" (a spare: started, by design not serving until a slot
// frees up), 1 when the deadline passes first (systemd then stops the node and the unit fails to start).
// Usage: node wait-ready.mjs [deadline-seconds]; reads IDGEN_METRICS_LISTEN (the unit's) for the address.
// Also the image's HEALTHCHECK (Dockerfile). No dependencies: it runs from /opt/idgen/deploy with the unit's node.
const deadlineMs = Date.now() + 1000 * Number(process.argv[2] ?? 90);
const listen = process.env.IDGEN_METRICS_LISTEN ?? '127.0.0.1:9464';
if (listen.trim() === '' || listen.trim() === 'off') {
  console.error('wait-ready: IDGEN_METRICS_LISTEN is off: nothing to poll (set a metrics address for the unit)');
  process.exit(1);
}
// A wildcard listener is reached on loopback.
const address = listen.replace(/^0\.0\.0\.0:/, '127.0.0.1:').replace(/^\[::\]:/, '[::1]:');
const url = `http://${address}/readyz`;
let last = 'no answer yet';
while (Date.now() < deadlineMs) {
  try {
    const answer = await fetch(url, { signal: AbortSignal.timeout(2000) });
    const body = await answer.json().catch(() => ({}));
    if (answer.status === 200) process.exit(0);
    if (body.reason === 'waiting-for-slot') {
      console.error(`wait-ready: started as a spare (${body.detail ?? 'every slot held'})`);
      process.exit(0);
    }
    last = `${answer.status} ${body.reason ?? ''}${body.cause ? ` (${body.cause})` : ''}`;
  } catch (e) {
    last = e instanceof Error ? e.message : String(e);
  }
  await new Promise((resolve) => setTimeout(resolve, 250));
}
console.error(`wait-ready: ${url} not ready before the deadline: ${last}`);
process.exit(1);
