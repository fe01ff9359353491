import { ConsecutiveBreaker, circuitBreaker, handleWhen, noop, retry } from 'cockatiel';
import { Etcd3, GRPCDeadlineExceededError, GRPCUnavailableError, isRecoverableError } from 'etcd3';
import type { IKeyValue, IOptions, IResponseOp } from 'etcd3';

/**
 * How long a host's circuit stays open after three failures in a row before one call may try it again.
 * The etcd3 client's default is 5 s: after etcd comes back, claims and keep-alives would be refused
 * locally for up to that long ("circuit breaker is open") although etcd answers. Every call here has its
 * own timeout and the lease its own backoff, so a short window is enough to spare a dead host.
 */
export const HOST_CIRCUIT_HALF_OPEN_MS = 1000;
import { createEtcdTls, type EtcdTls, type EtcdTlsOptions } from './etcd-tls.js';

type WatchBackoff = NonNullable<NonNullable<IOptions['faultHandling']>['watchBackoff']>;

/** etcd3's watch reconnect delays (its own backoff interface): 100 ms, doubling, at most 2 s. */
export function watchBackoff(delayMs: number): WatchBackoff {
  return { duration: delayMs, next: () => watchBackoff(Math.min(delayMs * 2, WATCH_BACKOFF_MAX_MS)) };
}
const WATCH_BACKOFF_MAX_MS = 2_000;

/**
 * Creates the `etcd3` client for validated connection options.
 *
 * Retries are decided by the caller, not by the library: etcd3's default global policy re-sends any call
 * that failed with a recoverable error, including a transaction that committed and whose answer was lost.
 * A re-sent claim then finds its own key and claims a second slot: one node holding two. So the client retries nothing
 * unless `retryReads` says every call made through it is a read (discovery, the CLI); the lease retries in
 * its own loops, where each write is idempotent or guarded by a compare.
 */
export function createEtcdClient(o: {
  endpoints: readonly string[];
  tls: EtcdTlsOptions | undefined;
  auth: { readonly username: string; readonly password: string } | undefined;
  /** Every call through this client only reads: let the library retry recoverable failures (3 attempts). */
  retryReads?: boolean;
  /**
   * A deadline on every unary call made without one, including the library's own `Authenticate` (which etcd3 sends
   * with no deadline: against a silent etcd it waits for ever). For a short-lived process (the CLI).
   */
  callTimeoutMs?: number;
}): Etcd3 {
  const options: IOptions = {
    hosts: [...o.endpoints],
    dialTimeout: 5000,
    faultHandling: {
      global: o.retryReads === true ? retry(handleWhen(isRecoverableError), { maxAttempts: 3 }) : noop,
      host: () =>
        circuitBreaker(handleWhen(isRecoverableError), {
          halfOpenAfter: HOST_CIRCUIT_HALF_OPEN_MS,
          breaker: new ConsecutiveBreaker(3),
        }),
      // Watches (discovery's node list, a holder's own worker key) reconnect within 2 s of etcd answering again,
      // not after up to 30 s (cockatiel's default ceiling), and a stream cancelled at close leaves a reconnect
      // timer of at most 2 s behind it (etcd3 schedules one even with no watcher left).
      watchBackoff: watchBackoff(100),
    },
  };
  let etcdTls: EtcdTls | undefined;
  if (o.tls !== undefined) {
    const buf = (v: string | Buffer | undefined): Buffer | undefined => (v === undefined ? undefined : Buffer.from(v));
    const credentials: NonNullable<IOptions['credentials']> = { rootCertificate: buf(o.tls.ca) ?? Buffer.alloc(0) };
    const key = buf(o.tls.key);
    const cert = buf(o.tls.cert);
    if (key !== undefined) credentials.privateKey = key;
    if (cert !== undefined) credentials.certChain = cert;
    options.credentials = credentials;
    // The same material on credentials of ours: no TLS server name for an etcd given by IP (DEP0123, etcd-tls.ts).
    etcdTls = createEtcdTls({ ca: credentials.rootCertificate, key, cert });
    options.grpcOptions = etcdTls.channelOptions;
  }
  const callMs = o.callTimeoutMs;
  // Streams (watches, keep-alives) live longer than any call: no deadline on them.
  const callOptions =
    callMs === undefined
      ? undefined
      : (c: { isStream: boolean }) => (c.isStream ? {} : { deadline: new Date(Date.now() + callMs) });
  if (callOptions !== undefined) options.defaultCallOptions = callOptions;
  if (o.auth !== undefined)
    options.auth = {
      username: o.auth.username,
      password: o.auth.password,
      ...(callOptions === undefined ? {} : { callOptions }),
    };
  const client = new Etcd3(options);
  etcdTls?.authenticateWith(client);
  return client;
}

/** The value of the first key of a range response in a transaction, as text; `undefined` when absent. */
export function rangeValue(op: IResponseOp | undefined): string | undefined {
  const kv = op?.response_range?.kvs?.[0];
  return kv === undefined ? undefined : kv.value.toString('utf8');
}

/** A key as the lease reads it: its value as text, the lease it is bound to ("0": none) and its mod revision. */
export interface KeyRead {
  readonly value: string;
  readonly lease: string;
  readonly modRevision: string;
}

/** The first of `kvs` as a {@link KeyRead}; `undefined` when there is none. */
export function firstKey(kvs: readonly IKeyValue[] | undefined): KeyRead | undefined {
  const kv = kvs?.[0];
  return kv === undefined
    ? undefined
    : { value: kv.value.toString('utf8'), lease: String(kv.lease), modRevision: String(kv.mod_revision) };
}

/** The first key of a range response in a transaction; `undefined` when absent. */
export function rangeKey(op: IResponseOp | undefined): KeyRead | undefined {
  return firstKey(op?.response_range?.kvs);
}

/** A request {@link withTimeout} gave up on: etcd may still have acted on it. */
export class NoAnswerError extends Error {
  override readonly name = 'NoAnswerError';
}

/**
 * Rejects after `ms` with a {@link NoAnswerError} naming `what`; the original promise's late rejection is swallowed.
 */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  p.catch(() => undefined);
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new NoAnswerError(`${what} timed out after ${Math.round(ms)} ms`)),
        Math.max(0, ms),
      );
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Whether a request failed without etcd's answer, so etcd may have acted on it: no answer in time, its deadline
 * passed, or the connection went. A request etcd answered (refused, denied, invalid) is not one.
 */
export function outcomeUnknown(e: unknown): boolean {
  return e instanceof NoAnswerError || e instanceof GRPCDeadlineExceededError || e instanceof GRPCUnavailableError;
}

/** gRPC call options with a deadline `ms` from now (so a stalled etcd cannot hold a call open). */
export function deadlineIn(ms: number): { deadline: Date } {
  return { deadline: new Date(Date.now() + Math.max(1, ms)) };
}

/** Waits `ms`; rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(
      () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      },
      Math.max(0, ms),
    );
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A short description of an unknown error for logs and messages. */
export function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}
