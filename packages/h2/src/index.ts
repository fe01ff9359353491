export { H2Connection, H2ConnectionError, H2Stream } from './connection.js';
export type { H2ConnectionOptions, H2Headers, H2ResponseHeaders } from './connection.js';
export { ErrorCode, Flag, FrameType, PREFACE } from './frames.js';
export { encodeHeaders, HpackDecoder, HpackError } from './hpack.js';
