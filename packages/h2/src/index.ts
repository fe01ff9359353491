export { H2Connection, H2ConnectionError, H2Stream } from './connection.js';
export type { H2ConnectionOptions, H2Headers, H2ResponseHeaders, H2StreamState } from './connection.js';
export { ErrorCode, Flag, FrameType, PREFACE } from './frames.js';
export { parseContentLength } from './field-rules.js';
// HpackDecoder: packages/serving/src/malformed-requests.spec.ts decodes the server's answers with it; HpackError is
// what its decode() throws.
export { encodeHeaders, HpackDecoder, HpackError } from './hpack.js';
export { H2_DEFAULTS } from './limits.js';
export type { H2FloodLimits, H2RefusalReason } from './limits.js';
export { StreamTable } from './stream-table.js';
