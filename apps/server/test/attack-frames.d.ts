/** One HTTP/2 frame: the 9-byte header (length, type, flags, stream) and `payload`. */
export function frame(type: number, flags: number, stream: number, payload?: Buffer): Buffer;
/** A 32-bit big-endian word. */
export function word(n: number): Buffer;
