import type { Http2Session } from 'node:http2';
import { StreamTable } from '@idgen/h2';

/* The node:http2 fallback's work-around for the GC trap @idgen/h2's StreamTable documents (it was @idgen/http2-stream-table). */
/**
 * Puts a {@link StreamTable} in place of a new session's `streams` Map. Returns why it did not, when node's
 * internals are not what this was written against (then nothing is changed: the session works as node built
 * it, only with the GC cost above). Call on the server's 'session' event, before the session has streams.
 */
export function installStreamTable(
  session: Http2Session,
): { readonly installed: true } | { readonly installed: false; readonly why: string } {
  const kState = Object.getOwnPropertySymbols(session).find((symbol) => symbol.description === 'state');
  if (kState === undefined) return { installed: false, why: "node:http2 sessions no longer have a 'state' symbol" };
  const state = (session as unknown as Record<symbol, unknown>)[kState] as {
    streams?: unknown;
    pendingStreams?: unknown;
  } | null;
  if (typeof state !== 'object' || state === null)
    return { installed: false, why: 'node:http2 session state is not an object' };
  // node's own SafeMap and SafeSet (from its primordials: not `instanceof Map` here), so checked by shape.
  const streams = state.streams as Partial<Map<unknown, unknown>> | null | undefined;
  const mapLike =
    typeof streams === 'object' &&
    streams !== null &&
    typeof streams.get === 'function' &&
    typeof streams.set === 'function' &&
    typeof streams.delete === 'function' &&
    typeof streams.forEach === 'function' &&
    streams.size === 0;
  if (!mapLike) return { installed: false, why: "node:http2 session 'streams' is not an empty Map" };
  const pending = state.pendingStreams as Partial<Set<unknown>> | null | undefined;
  const setLike =
    typeof pending === 'object' &&
    pending !== null &&
    typeof pending.add === 'function' &&
    typeof pending.delete === 'function' &&
    typeof pending.forEach === 'function' &&
    pending.size === 0;
  if (!setLike) return { installed: false, why: "node:http2 session 'pendingStreams' is not an empty Set" };
  state.streams = new StreamTable<number, unknown>(16);
  // Streams pass through this Set while they open: the same churn, so the same old-space copies (emptier:
  // it is nearly always empty when rebuilt, but each rebuild is garbage only a Mark-Compact frees).
  state.pendingStreams = new StreamTable<unknown, unknown>(16);
  return { installed: true };
}
