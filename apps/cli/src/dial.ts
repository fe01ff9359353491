import { connect as netConnect, isIP, type Socket } from 'node:net';
import { checkServerIdentity, connect as tlsConnect, type PeerCertificate, type TLSSocket } from 'node:tls';
import { CliError, EXIT_UNREACHABLE } from './exit-codes.js';

/** TLS material to dial with (PEM text), and the flags that give each, to name them in a hint. */
export interface DialTls {
  readonly ca?: string | undefined;
  readonly cert?: string | undefined;
  readonly key?: string | undefined;
  /**
   * The name the peer's certificate must carry, when it is not the URL's host: a node dialled at its pod IP whose
   * certificate names its Service (`--tls-servername`, as grpcurl's `-servername`). Sent as SNI too.
   */
  readonly servername?: string | undefined;
}

/** How a dial names the peer and its flags in its one line: an etcd (`--etcd-ca` …) or a node (`--tls-ca` …). */
export interface DialPeer {
  /** `etcd` or `node`. */
  readonly kind: string;
  readonly caFlag: string;
  readonly certFlags: string;
  /** The flag that names the expected server name, for a name-mismatch hint; none for etcd. */
  readonly servernameFlag?: string;
}

/** The peers the CLI dials. */
export const ETCD_PEER: DialPeer = { kind: 'etcd', caFlag: '--etcd-ca', certFlags: '--etcd-cert and --etcd-key' };
export const NODE_PEER: DialPeer = {
  kind: 'node',
  caFlag: '--tls-ca',
  certFlags: '--tls-cert and --tls-key',
  servernameFlag: '--tls-servername',
};

/** The HTTP/2 client preface and an empty SETTINGS frame (RFC 9113 §3.4): any HTTP/2 server answers with SETTINGS. */
const H2_PREFACE = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'),
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
]);

type Stage = 'tcp' | 'tls' | 'h2';

/**
 * Dials `url` the way etcd's and a node's clients will (TCP, the TLS handshake for `https://` with the given CA and
 * client certificate, then the HTTP/2 preface until the server's SETTINGS), all within `timeoutMs`, and closes the
 * connection. Rejects with an exit-3 {@link CliError} whose message says what went wrong in one line: refused, reset,
 * no TLS handshake in time (a paused or silent server), an untrusted certificate, "this etcd wants a client
 * certificate", "this node speaks TLS". The CLI dials first so that a dead endpoint is found within the dial
 * timeout by a socket it owns and always destroys: grpc-js has no handshake timeout and does not destroy a socket
 * whose handshake is pending when its channel closes, so that socket kept `idgen` alive
 * past its deadline.
 */
export async function dialCheck(
  url: string,
  tls: DialTls | undefined,
  timeoutMs: number,
  peer: DialPeer,
): Promise<void> {
  const startedMs = Date.now();
  try {
    await dialOnce(url, tls, timeoutMs, peer);
  } catch (e) {
    // A plaintext dial a TLS server dropped at the preface: ask it for a TLS handshake, to say so in one line.
    const u = new URL(url);
    if (!(e instanceof DialFailure)) throw e;
    if (u.protocol !== 'http:' || e.stage !== 'h2' || e.timedOut) throw e.cli;
    const left = timeoutMs - (Date.now() - startedMs);
    if (left > 0 && (await speaksTlsProbe(u.hostname, Number(u.port || 80), left)))
      throw new CliError(EXIT_UNREACHABLE, `${peer.kind} ${u.protocol}//${u.host}: ${speaksTls(peer)}`);
    throw e.cli;
  }
}

/** A failed dial: its one line, and at which stage it failed. */
class DialFailure extends Error {
  constructor(
    readonly cli: CliError,
    readonly stage: Stage,
    readonly timedOut: boolean,
  ) {
    super(cli.message);
  }
}

/** Whether something at host:port completes (or refuses with an alert) a TLS handshake within `ms`. */
function speaksTlsProbe(host: string, port: number, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const t = tlsConnect({ host, port, rejectUnauthorized: false, ALPNProtocols: ['h2'] });
    const end = (v: boolean): void => {
      clearTimeout(timer);
      t.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => end(false), ms);
    t.once('secureConnect', () => end(true));
    t.once('error', (e) => end(/alert/i.test(e.message)));
  });
}

function dialOnce(url: string, tls: DialTls | undefined, timeoutMs: number, peer: DialPeer): Promise<void> {
  const u = new URL(url);
  const secure = u.protocol === 'https:';
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const port = Number(u.port || (secure ? 443 : 80));
  const where = `${peer.kind} ${u.protocol}//${u.host}`;
  // The name the certificate must carry: --tls-servername when given, else the URL's host (Node's own rule).
  const expected = tls?.servername ?? host;
  return new Promise<void>((resolve, reject) => {
    let stage: Stage = 'tcp';
    let sock: Socket | TLSSocket | undefined;
    let done = false;
    const finish = (message?: string, timedOut = false): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock?.destroy();
      raw.destroy();
      if (message === undefined) resolve();
      else reject(new DialFailure(new CliError(EXIT_UNREACHABLE, `${where}: ${message}`), stage, timedOut));
    };
    const timer = setTimeout(() => finish(timeoutText(stage, timeoutMs, secure, peer), true), timeoutMs);
    const raw = netConnect({ host, port });
    raw.setNoDelay(true);
    raw.once('error', (e: NodeJS.ErrnoException) => finish(errorText(e, stage, secure, peer)));
    raw.once('connect', () => {
      if (!secure) {
        stage = 'h2';
        sock = raw;
        awaitSettings(raw, secure, peer, finish);
        return;
      }
      stage = 'tls';
      const t = tlsConnect({
        socket: raw,
        host,
        ALPNProtocols: ['h2'],
        rejectUnauthorized: false,
        ...(tls?.servername !== undefined
          ? { servername: tls.servername }
          : isIP(host) === 0
            ? { servername: host }
            : {}),
        ...(tls?.ca === undefined ? {} : { ca: tls.ca }),
        ...(tls?.cert === undefined ? {} : { cert: tls.cert }),
        ...(tls?.key === undefined ? {} : { key: tls.key }),
      });
      sock = t;
      t.once('error', (e: NodeJS.ErrnoException) => finish(errorText(e, stage, secure, peer)));
      t.once('secureConnect', () => {
        const certificate = t.getPeerCertificate() as PeerCertificate;
        // Node checks the name (servername, else host) once the chain is trusted, and reports a mismatch as an
        // authorization error too (ERR_TLS_CERT_ALTNAME_INVALID): no CA problem, so it is said as what it is.
        const mismatch = t.authorized
          ? checkServerIdentity(expected, certificate) !== undefined
          : String(t.authorizationError) === 'ERR_TLS_CERT_ALTNAME_INVALID';
        if (mismatch) {
          finish(nameMismatch(expected, certificate, peer));
          return;
        }
        if (!t.authorized) {
          finish(untrusted(String(t.authorizationError), tls?.ca !== undefined, peer));
          return;
        }
        stage = 'h2';
        awaitSettings(t, secure, peer, finish);
      });
    });
  });
}

/** Sends the HTTP/2 preface; the server's first frame must be SETTINGS. A TLS 1.3 client-certificate refusal comes here. */
function awaitSettings(s: Socket, secure: boolean, peer: DialPeer, finish: (message?: string) => void): void {
  let got = Buffer.alloc(0);
  s.on('data', (d: Buffer) => {
    got = Buffer.concat([got, d]);
    if (got.length < 9) return;
    if (got[3] === 0x04) finish();
    else if (!secure && (got[0] === 0x15 || got[0] === 0x16 || /HTTPS|TLS/i.test(got.toString('latin1'))))
      finish(speaksTls(peer));
    else finish(`answered, but not with HTTP/2 (first bytes ${got.subarray(0, 8).toString('hex')})`);
  });
  s.once('end', () =>
    finish(
      !secure && got.length > 0 && (got[0] === 0x15 || got[0] === 0x16)
        ? speaksTls(peer)
        : 'closed the connection without an HTTP/2 answer',
    ),
  );
  s.write(H2_PREFACE);
}

function speaksTls(peer: DialPeer): string {
  return `this ${peer.kind} speaks TLS: use https:// (with ${peer.caFlag} for its CA)`;
}

/** A certificate that does not name `expected`: the names it has, and how to ask for one of them. */
function nameMismatch(expected: string, certificate: PeerCertificate, peer: DialPeer): string {
  const names =
    certificate.subjectaltname === undefined || certificate.subjectaltname === ''
      ? `CN=${String(certificate.subject?.CN ?? '')}`
      : certificate.subjectaltname;
  const hint =
    peer.servernameFlag === undefined
      ? 'dial it by one of those names'
      : `give the name it has with ${peer.servernameFlag} (or dial it by that name)`;
  return `its certificate is for ${names}, not ${expected}: name mismatch: ${hint}`;
}

function untrusted(reason: string, caGiven: boolean, peer: DialPeer): string {
  return caGiven
    ? `its certificate is not signed by ${peer.caFlag} (${reason}): wrong CA file?`
    : `its certificate is not trusted (${reason}): give the CA that signed it with ${peer.caFlag}`;
}

function timeoutText(stage: Stage, ms: number, secure: boolean, peer: DialPeer): string {
  if (stage === 'tcp') return `no TCP connection within ${ms} ms (dial timeout)`;
  if (stage === 'tls')
    return `the TLS handshake did not finish within ${ms} ms (dial timeout): the ${peer.kind} is paused or hung, or does not speak TLS`;
  return `connected, but no HTTP/2 answer within ${ms} ms (dial timeout): the ${peer.kind} is paused or hung${secure ? '' : ', or speaks TLS (https://)'}`;
}

/** OpenSSL's multi-line error as one short phrase: `TLS alert "bad certificate"`, else its first line. */
function shortTlsMessage(message: string): string {
  const alert = /alert ([a-z ]+?)(?::|\n|$)/i.exec(message);
  if (alert?.[1] !== undefined) return `TLS alert "${alert[1].trim()}"`;
  const reason = /:SSL routines:[^:]*:([^:\n]+)/.exec(message);
  return (reason?.[1] ?? message.split('\n')[0] ?? message).trim();
}

function errorText(e: NodeJS.ErrnoException, stage: Stage, secure: boolean, peer: DialPeer): string {
  const m = shortTlsMessage(e.message);
  if (/certificate required|bad certificate/i.test(m))
    return `this ${peer.kind} wants a client certificate: give ${peer.certFlags} (${m})`;
  if (/unknown ca|certificate unknown|unsupported certificate|decrypt error/i.test(m))
    return `it refused this client certificate (${m})`;
  if (secure && /wrong version number|packet length too long|unknown protocol|http request/i.test(m))
    return `it does not speak TLS: use http:// (${m})`;
  if (e.code === 'ECONNREFUSED') return 'connection refused (nothing listens there)';
  if (e.code === 'ECONNRESET' || e.code === 'EPIPE')
    return stage === 'tls'
      ? `connection reset during the TLS handshake (${e.code})`
      : stage === 'h2' && !secure
        ? `connection reset (${e.code}): it may speak TLS (https://)`
        : `connection reset (${e.code})`;
  return `${stage === 'tls' ? 'TLS handshake failed: ' : ''}${m}`;
}
