import { InvalidIdError } from './id.js';
import { MAX_ID } from './layout.js';

/*
 * The keyed form of an ID (issue 35, docs/design.md §1 "Forms"): a keyed permutation of the 63 value bits, so a
 * public ID shows neither when it was minted nor how many IDs came before it, and only a holder of the key turns it
 * back into the ID. The core has no imports, so the round function is built here from 32-bit integer mixing.
 */

const scratch = new DataView(new ArrayBuffer(8));

/** Feistel rounds. An even number brings the two halves back to their starting widths (31 high, 32 low bits). */
const ROUNDS = 8;
/** Shortest key, in bytes (128 bits). */
export const KEYED_FORM_MIN_KEY_BYTES = 16;
/** Longest key, in bytes (512 bits). */
export const KEYED_FORM_MAX_KEY_BYTES = 64;

/** Chris Wellons' `lowbias32` (a bijection on 32 bits with low bias; github.com/skeeto/hash-prospector). */
function mix32(x: number): number {
  let h = x ^ (x >>> 16);
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Reads a key given as bytes or as hex text; throws naming the allowed length. */
function keyBytes(key: Uint8Array | string): Uint8Array {
  let bytes: Uint8Array;
  if (typeof key === 'string') {
    const hex = key.trim();
    if (!/^(?:[0-9a-fA-F]{2})+$/.test(hex)) {
      throw new RangeError(
        `a keyed-form key given as text must be hex digits in pairs (${KEYED_FORM_MIN_KEY_BYTES * 2}–` +
          `${KEYED_FORM_MAX_KEY_BYTES * 2} of them), got ${key.length > 12 ? `${key.length} characters` : JSON.stringify(key)}`,
      );
    }
    bytes = new Uint8Array(hex.length / 2);
    for (let i = 0; i < bytes.length; i++) bytes[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  } else if (key instanceof Uint8Array) {
    bytes = key;
  } else {
    throw new TypeError(`a keyed-form key must be a Uint8Array or a hex string, got ${typeof key}`);
  }
  if (bytes.length < KEYED_FORM_MIN_KEY_BYTES || bytes.length > KEYED_FORM_MAX_KEY_BYTES) {
    throw new RangeError(
      `a keyed-form key must be ${KEYED_FORM_MIN_KEY_BYTES} to ${KEYED_FORM_MAX_KEY_BYTES} bytes ` +
        `(${KEYED_FORM_MIN_KEY_BYTES * 8}–${KEYED_FORM_MAX_KEY_BYTES * 8} bits), got ${bytes.length}`,
    );
  }
  return bytes;
}

/** Two 32-bit round keys per round, each depending on every key byte and on its index. */
function roundKeys(bytes: Uint8Array): Uint32Array {
  const words = new Uint32Array(Math.ceil(bytes.length / 4));
  bytes.forEach((b, i) => {
    words[i >>> 2] = ((words[i >>> 2] as number) | (b << ((i & 3) * 8))) >>> 0;
  });
  const keys = new Uint32Array(ROUNDS * 2);
  for (let r = 0; r < keys.length; r++) {
    let h = mix32((Math.imul(r + 1, 0x9e3779b9) ^ bytes.length) >>> 0);
    for (const w of words) h = mix32((h ^ w) >>> 0);
    keys[r] = mix32((h + r) >>> 0);
  }
  return keys;
}

/**
 * A keyed form: the ID's 63 value bits through an 8-round Feistel network keyed by a secret the deployment keeps
 * (16–64 bytes). {@link KeyedForm.hide} and {@link KeyedForm.reveal} are exact inverses, and every value from 0 to
 * 2^63 − 1 is the keyed form of exactly one ID (a Feistel network is a bijection whatever its round function), so the
 * result is still a positive signed 64-bit integer and a unique key.
 *
 * 63 is odd, so the network is unbalanced and alternating, as NIST SP 800-38G's FF1 splits an odd width: the halves
 * are 31 and 32 bits, each round XORs a keyed function of one half into the other (truncated to its width), and the
 * two swap widths every round; an even number of rounds ends on the starting split. No cycle-walking is needed.
 *
 * What it is for: hiding the mint time, the worker and the sequence (how many IDs a worker minted in that
 * millisecond) from a casual reader of a public ID, as Mastodon hashes its IDs' low bits. What it is not: a
 * cryptographic pseudorandom permutation. The round function is integer mixing (`lowbias32` with round keys XORed in),
 * not a block cipher, and no analysis backs it; assume someone holding many IDs with their keyed forms, or able to
 * ask for the keyed form of chosen IDs, could learn enough to decode others. Where that matters, use FF1 with AES
 * outside the core. Rotating the key changes every keyed form: store the ID, and the key with its deployment.
 */
export class KeyedForm {
  private readonly keys: Uint32Array;

  /** @internal use {@link createKeyedForm} */
  constructor(key: Uint8Array | string) {
    this.keys = roundKeys(keyBytes(key));
  }

  private round(i: number, x: number): number {
    const k = this.keys;
    let h = mix32((x ^ (k[2 * i] as number)) >>> 0);
    h = mix32((h ^ (k[2 * i + 1] as number)) >>> 0);
    // Even rounds produce the 31-bit half, odd rounds the 32-bit half.
    return (i & 1) === 0 ? h & 0x7fffffff : h;
  }

  /**
   * The keyed form of an ID. Throws `TypeError` for a value that is not a bigint and `RangeError` outside
   * 0 … 2^63 − 1.
   */
  hide(id: bigint): bigint {
    if (typeof id !== 'bigint') throw new TypeError(`KeyedForm.hide: an ID must be a bigint, got ${typeof id}`);
    if (id < 0n || id > MAX_ID) throw new RangeError(`KeyedForm.hide: an ID must be from 0 to ${MAX_ID}, got ${id}`);
    scratch.setBigUint64(0, id);
    let a = scratch.getUint32(0); // 31 bits
    let b = scratch.getUint32(4); // 32 bits
    for (let i = 0; i < ROUNDS; i++) {
      const c = (a ^ this.round(i, b)) >>> 0;
      a = b;
      b = c;
    }
    scratch.setUint32(0, a);
    scratch.setUint32(4, b);
    return scratch.getBigUint64(0);
  }

  /**
   * The ID of a keyed form ({@link hide}'s exact inverse under the same key). Throws `TypeError` for a value that
   * is not a bigint and {@link InvalidIdError} (`out-of-range`) outside 0 … 2^63 − 1. Any value in range decodes:
   * the wrong key gives a wrong ID, not an error, so check the decoded ID (its time, its region) before trusting it.
   */
  reveal(keyed: bigint): bigint {
    if (typeof keyed !== 'bigint') {
      throw new TypeError(`KeyedForm.reveal: a keyed ID must be a bigint, got ${typeof keyed}`);
    }
    if (keyed < 0n || keyed > MAX_ID) {
      throw new InvalidIdError(
        'out-of-range',
        String(keyed),
        `${keyed} is not a keyed ID: keyed IDs are from 0 to ${MAX_ID}`,
      );
    }
    scratch.setBigUint64(0, keyed);
    let a = scratch.getUint32(0);
    let b = scratch.getUint32(4);
    for (let i = ROUNDS - 1; i >= 0; i--) {
      const previousB = a;
      a = (b ^ this.round(i, previousB)) >>> 0;
      b = previousB;
    }
    scratch.setUint32(0, a);
    scratch.setUint32(4, b);
    return scratch.getBigUint64(0);
  }
}

/**
 * The keyed form under `key`: 16–64 bytes, as a `Uint8Array` or as hex text (32–128 hex digits, what
 * `idgen format --to keyed --key-file` reads). Throws `RangeError` naming the allowed length, `TypeError` for
 * anything else. Derives the round keys once; reuse the result.
 */
export function createKeyedForm(key: Uint8Array | string): KeyedForm {
  return new KeyedForm(key);
}
