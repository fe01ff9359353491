export { H2Connection, H2ConnectionError, H2Stream } from './connection.js';
export type { H2ConnectionOptions, H2Headers, H2ResponseHeaders, H2StreamState } from './connection.js';
export { ErrorCode, Flag, FrameType, PREFACE } from './frames.js';
export { isValidFieldName, isValidFieldValue, parseContentLength } from './field-rules.js';
export { encodeHeaders, HpackDecoder, HpackError } from './hpack.js';
export { DEFAULT_FLOOD_LIMITS } from './limits.js';
export type { H2FloodLimits, H2RefusalReason } from './limits.js';
export { StreamTable } from './stream-table.js';
