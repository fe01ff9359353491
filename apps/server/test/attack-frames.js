// HTTP/2 frames written by hand for the attackers (abuse-attacker.js, abuse-serving-attacker.js) and abuse.spec.ts:
// what an attacker sends is built byte by byte, not through a client library that would refuse to send it.
'use strict';

/** One frame: the 9-byte header (length, type, flags, stream) and `payload`. */
function frame(type, flags, stream, payload = Buffer.alloc(0)) {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/** A 32-bit big-endian word (WINDOW_UPDATE increments, RST_STREAM error codes). */
function word(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

module.exports = { frame, word };
