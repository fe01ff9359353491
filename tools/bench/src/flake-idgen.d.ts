// flake-idgen 1.4.0 ships no types; this declares the part the core benchmark calls.
declare module 'flake-idgen' {
  interface FlakeIdOptions {
    id?: number;
    datacenter?: number;
    worker?: number;
    epoch?: number;
  }
  class FlakeId {
    constructor(options?: FlakeIdOptions);
    /** 8 bytes, big-endian; throws when the 4,096 sequence values of this millisecond are spent. */
    next(): Buffer;
  }
  export = FlakeId;
}
