/**
 * The rules a request's header fields must follow before any handler sees them (RFC 9113 §8.2, §8.3, RFC 9110
 * §5.1, §8.6). A request that breaks one is malformed (RFC 9113 §8.1.1): the connection resets that one stream
 * with PROTOCOL_ERROR, as nghttp2 does, and keeps serving the others.
 *
 * Fields arrive as the HPACK decoder gives them: latin1 strings, one char per octet (so every char code is
 * below 0x100). The checks are loops over char codes with a lookup table: they run on every field of every
 * request.
 */

/** Request header fields that are only meaningful hop by hop (RFC 9113 §8.2.2): their presence is malformed. */
const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

/**
 * 1 for the octets a regular field name may hold: RFC 9110 §5.1 `token` (tchar) without the uppercase letters
 * RFC 9113 §8.2.1 forbids. So no SP, no ':' (only pseudo-header names start with one), no CTL, nothing >= 0x80.
 */
const NAME_CHARS = ((): Uint8Array => {
  const table = new Uint8Array(256);
  for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz") table[c.charCodeAt(0)] = 1;
  return table;
})();

/**
 * True when `name` is a valid regular field name: at least one octet, each a lowercase tchar
 * (RFC 9110 §5.1, RFC 9113 §8.2.1).
 */
export function isValidFieldName(name: string): boolean {
  const n = name.length;
  if (n === 0) return false;
  for (let i = 0; i < n; i++) if (NAME_CHARS[name.charCodeAt(i)] !== 1) return false;
  return true;
}

/** What is wrong with a field value: nothing, a forbidden octet (NUL, LF, CR), or SP/HTAB at an end. */
export const ValueProblem = { none: 0, forbiddenOctet: 1, surroundingWhitespace: 2 } as const;
/** One of {@link ValueProblem}'s values. */
export type ValueProblem = (typeof ValueProblem)[keyof typeof ValueProblem];

/**
 * Checks a field value against RFC 9113 §8.2.1: no NUL, LF or CR anywhere, and no SP or HTAB at either end.
 * Other control octets and obs-text are kept, as RFC 9110 §5.5 lets a recipient do (and as nghttp2 and Python's
 * h2 do). The empty value is valid.
 */
export function fieldValueProblem(value: string): ValueProblem {
  const n = value.length;
  if (n === 0) return ValueProblem.none;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c <= 0x0d && (c === 0x00 || c === 0x0a || c === 0x0d)) return ValueProblem.forbiddenOctet;
  }
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(n - 1);
  if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09) return ValueProblem.surroundingWhitespace;
  return ValueProblem.none;
}

/** True when `value` is a valid field value for RFC 9113 §8.2.1 (see {@link fieldValueProblem}). */
export function isValidFieldValue(value: string): boolean {
  return fieldValueProblem(value) === ValueProblem.none;
}

/**
 * True when a field passes the checks {@link parseRequestFields} makes of every field: its value has no
 * {@link ValueProblem}, and its name is a pseudo-header's (those are checked by name there) or a valid regular one.
 * The HPACK decoder asks it once per literal and remembers it for a table entry (`HpackDecoder.fieldsClean`).
 */
export function isCleanField(name: string, value: string): boolean {
  return fieldValueProblem(value) === ValueProblem.none && (name.charCodeAt(0) === 0x3a || isValidFieldName(name));
}

/**
 * A `content-length` value as a number of octets, or -1 when it is not one: RFC 9110 §8.6 allows `1*DIGIT`
 * and nothing else (no sign, no spaces, no hex, no exponent, not empty, not a list such as "5, 5" from a
 * repeated field). Values above 2^53-1 are refused too: no body that large can arrive, and a larger number
 * would lose precision (RFC 9110 §8.6 asks recipients to guard against exactly that).
 *
 * Unlike `Number()`, which reads "0x0b" as 11, "1e3" as 1000 and "" or " " as 0.
 */
export function parseContentLength(value: string): number {
  const n = value.length;
  if (n === 0 || n > 16) return -1;
  let length = 0;
  for (let i = 0; i < n; i++) {
    const d = value.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return -1;
    length = length * 10 + d;
  }
  return length <= Number.MAX_SAFE_INTEGER ? length : -1;
}

/** What {@link parseRequestFields} fills in: the pseudo-headers, the regular fields, the declared length. */
export interface RequestParts {
  method: string;
  path: string;
  authority: string;
  scheme: string;
  /** Regular fields, name → value (repeated fields joined with ", ", cookies with "; "). */
  readonly headers: Record<string, string>;
  /** The `content-length` as a number, -1 when there is none. */
  declaredLength: number;
  /**
   * Set with a malformed request whose one fault is SP/HTAB around a value: it is answered 400 rather than reset
   * (see {@link parseRequestFields}).
   */
  badRequest: boolean;
}

/** A fresh {@link RequestParts} to pass to {@link parseRequestFields}. */
export function emptyRequestParts(): RequestParts {
  return { method: '', path: '', authority: '', scheme: '', headers: {}, declaredLength: -1, badRequest: false };
}

/**
 * Splits a request's decoded fields (flat `[name, value, …]`) into `parts` and says what is malformed about
 * them, if anything, or undefined when the request is well formed:
 * - pseudo-headers (RFC 9113 §8.3): unknown, repeated or after a regular field; `:method`, `:scheme` and a
 *   non-empty `:path` required; CONNECT refused (not supported, RFC 9113 §8.5);
 * - every field (RFC 9113 §8.2.1): a regular name that is empty or not lowercase token chars (so no SP, ':',
 *   CTL or octet >= 0x80), a value with NUL, CR or LF or with SP/HTAB at either end (this last one alone sets
 *   `parts.badRequest`: the connection answers it 400 instead of resetting it);
 * - connection-specific fields, a `te` other than "trailers" (RFC 9113 §8.2.2);
 * - `content-length` (RFC 9110 §8.6) that is not `1*DIGIT`, or above 0 on a request that ends at its headers
 *   (`endStream`: no body can match it, RFC 9113 §8.1.1).
 *
 * `clean` true says every field already passed {@link isCleanField} (the decoder's `fieldsClean`): the character
 * checks are skipped; every other rule still applies.
 */
export function parseRequestFields(
  fields: readonly string[],
  endStream: boolean,
  parts: RequestParts,
  clean = false,
): string | undefined {
  const headers = parts.headers;
  let regular = false;
  let seen = 0;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i] ?? '';
    const value = fields[i + 1] ?? '';
    // `clean`: the decoder already knows every field passes the character checks (isCleanField).
    const valueProblem = clean ? ValueProblem.none : fieldValueProblem(value);
    if (valueProblem !== ValueProblem.none) {
      // Whitespace around a value is malformed too (RFC 9113 §8.2.1), but it cannot smuggle anything: such a request
      // gets the 400 that §8.2.1 recommends (an answer a client padding a value can read; §8.1.1 allows a response
      // before the stream closes) instead of a bare reset. NUL, CR and LF (and bad names, below) are reset.
      parts.badRequest = valueProblem === ValueProblem.surroundingWhitespace;
      return `invalid value of ${JSON.stringify(name)}`;
    }
    if (name.charCodeAt(0) === 0x3a) {
      if (regular) return `pseudo-header ${name} after regular fields`;
      const bit =
        name === ':method' ? 1 : name === ':path' ? 2 : name === ':scheme' ? 4 : name === ':authority' ? 8 : 0;
      if (bit === 0) return `unknown pseudo-header ${JSON.stringify(name)}`;
      if ((seen & bit) !== 0) return `repeated ${name}`;
      seen |= bit;
      if (bit === 1) parts.method = value;
      else if (bit === 2) parts.path = value;
      else if (bit === 4) parts.scheme = value;
      else parts.authority = value;
      continue;
    }
    regular = true;
    if (!clean && !isValidFieldName(name)) return `invalid field name ${JSON.stringify(name)}`;
    if (CONNECTION_SPECIFIC.has(name)) return `connection-specific field ${name}`;
    // TE's value is a case-insensitive token (RFC 9110 §10.1.4), as nghttp2 compares it.
    if (name === 'te' && value.toLowerCase() !== 'trailers') return 'te other than trailers';
    const prior = headers[name];
    if (prior === undefined) headers[name] = value;
    else headers[name] = prior + (name === 'cookie' ? '; ' : ', ') + value;
  }
  if ((seen & 1) === 0) return 'no :method';
  if (parts.method === 'CONNECT') return 'CONNECT is not supported';
  if ((seen & 6) !== 6 || parts.path === '') return 'no :scheme or :path';
  const length = headers['content-length'];
  if (length !== undefined) {
    // A repeated content-length was joined into a list above ("5, 5"): refused like any other non-digit value.
    const declared = parseContentLength(length);
    if (declared < 0) return 'a content-length that is not 1*DIGIT';
    if (endStream && declared > 0) return 'a content-length the body does not match';
    parts.declaredLength = declared;
  }
  if (parts.authority === '' && headers.host !== undefined) parts.authority = headers.host;
  return undefined;
}

/**
 * True when a trailer block's fields (flat `[name, value, …]`) are well formed: no pseudo-header (RFC 9113
 * §8.1), every name and value valid as for a request's fields (§8.2.1).
 */
export function areValidTrailers(fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i += 2) {
    if (!isValidFieldName(fields[i] ?? '') || !isValidFieldValue(fields[i + 1] ?? '')) return false;
  }
  return true;
}
