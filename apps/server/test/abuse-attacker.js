// Child process for abuse.spec.ts: one attacker on loopback, in a process of its own (the test's probe client must
// not share its event loop). Runs one named attack against 127.0.0.1:PORT for DURATION ms, one connection at a
// time, opening a new one whenever the server cuts the last, then prints {"connections":N} and exits.
// Plain JavaScript over the built @idgen/h2 (the server's test target builds it first).
'use strict';
const { connect } = require('node:net');
const { frame, word } = require('./attack-frames.js');
const { encodeHeaders, ErrorCode, Flag, FrameType, PREFACE } = require('@idgen/h2');

const [name, portText, durationText] = process.argv.slice(2);
const port = Number(portText);
const until = Date.now() + Number(durationText);

const repeat = (n, make) => Buffer.concat(Array.from({ length: n }, (_, i) => make(i)));

const GET = encodeHeaders([
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/healthz'],
  [':authority', 'a'],
]);
const NEXT_IDS = encodeHeaders([
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/idgen.v1.IdGenerator/NextIds'],
  [':authority', 'a'],
  ['content-type', 'application/grpc'],
  ['te', 'trailers'],
]);

/** Stream ids from 1 for one connection. */
function ids() {
  let next = 1;
  return () => {
    const id = next;
    next += 2;
    return id;
  };
}
/** 128 NextIds calls left open (no body): what a SETTINGS frame walks, and what fills the stream limit. */
const hold128 = (id) => repeat(128, () => frame(FrameType.HEADERS, Flag.END_HEADERS, id(), NEXT_IDS));

// Each attack, for one fresh connection: what it sends first, and the next chunk of its flood.
const ATTACKS = {
  continuation: () => {
    const flood = repeat(4_096, () => frame(FrameType.CONTINUATION, 0, 1));
    return { opening: frame(FrameType.HEADERS, 0, 1, NEXT_IDS.subarray(0, 2)), chunk: () => flood };
  },
  'hpack-bomb': () => {
    const id = ids();
    const name = Buffer.from('x-bomb');
    // A literal with incremental indexing and a new name (RFC 7541 §6.2.1), value of 4,000 = 127 + 33 + 30 × 128.
    const insert = Buffer.concat([
      Buffer.from([0x40, name.length]),
      name,
      Buffer.from([0x7f, 0x80 | 33, 30]),
      Buffer.alloc(4_000, 0x61),
    ]);
    const refs = Buffer.alloc(8_000, 0xbe); // index 62: the 4 KB entry
    return {
      opening: frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, id(), Buffer.concat([GET, insert])),
      chunk: () => {
        const stream = id();
        return Buffer.concat([
          frame(FrameType.HEADERS, Flag.END_STREAM, stream, Buffer.concat([GET, refs])),
          frame(FrameType.CONTINUATION, Flag.END_HEADERS, stream, refs),
        ]);
      },
    };
  },
  settings: () => {
    const id = ids();
    const big = frame(
      FrameType.SETTINGS,
      0,
      0,
      repeat(2_730, (i) => Buffer.from([0, 4, 0, 0, 0x10, i & 0xff])),
    );
    return { opening: hold128(id), chunk: () => big };
  },
  'made-you-reset': () => {
    const id = ids();
    return {
      chunk: () =>
        repeat(64, () => {
          const stream = id();
          return Buffer.concat([
            frame(FrameType.HEADERS, Flag.END_HEADERS, stream, NEXT_IDS),
            frame(FrameType.WINDOW_UPDATE, 0, stream, word(0)),
          ]);
        }),
    };
  },
  'rapid-reset': () => {
    const id = ids();
    return {
      chunk: () =>
        repeat(64, () => {
          const stream = id();
          return Buffer.concat([
            frame(FrameType.HEADERS, Flag.END_HEADERS, stream, NEXT_IDS),
            frame(FrameType.RST_STREAM, 0, stream, word(ErrorCode.CANCEL)),
          ]);
        }),
    };
  },
  'stream-limit': () => {
    const id = ids();
    return {
      opening: hold128(id),
      chunk: () => repeat(64, () => frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, id(), GET)),
    };
  },
  ping: () => {
    const flood = repeat(2_048, () => frame(FrameType.PING, 0, 0, Buffer.alloc(8)));
    return { chunk: () => flood };
  },
  'empty-data': () => {
    const flood = repeat(4_096, () => frame(FrameType.DATA, 0, 1));
    return { opening: frame(FrameType.HEADERS, Flag.END_HEADERS, 1, NEXT_IDS), chunk: () => flood };
  },
  'window-update': () => {
    const flood = repeat(2_048, () => frame(FrameType.WINDOW_UPDATE, 0, 0, word(1)));
    return { chunk: () => flood };
  },
  // Legal but heavy: 128 NextIds(4096) calls (each a whole millisecond of the worker's sequence) in one write,
  // again and again; the calls over the stream limit are refused and, past its budget, the connection is cut.
  'nextids-4096': () => {
    const id = ids();
    const body = frame(FrameType.DATA, Flag.END_STREAM, 0, Buffer.from([0, 0, 0, 0, 3, 0x08, 0x80, 0x20]));
    return {
      chunk: () =>
        repeat(128, () => {
          const stream = id();
          const data = Buffer.from(body);
          data.writeUInt32BE(stream, 5);
          return Buffer.concat([frame(FrameType.HEADERS, Flag.END_HEADERS, stream, NEXT_IDS), data]);
        }),
    };
  },
  'unknown-type': () => {
    const flood = repeat(2_048, () => frame(0x42, 0, 0, Buffer.alloc(8)));
    return { chunk: () => flood };
  },
};

/**
 * The zero-window flood: 300 connections at once, each with SETTINGS_INITIAL_WINDOW_SIZE 0 and 128 NextIds(4096)
 * calls kept open (each stream the server ends or resets is replaced at once), never a WINDOW_UPDATE: every answer
 * stays in the server. A connection the server cuts is opened again. Prints the connections opened and the
 * REFUSED_STREAM resets received.
 */
function zeroWindow() {
  const settings = frame(FrameType.SETTINGS, 0, 0, Buffer.from([0, 4, 0, 0, 0, 0]));
  const body = Buffer.from([0, 0, 0, 0, 3, 0x08, 0x80, 0x20]);
  const call = (id) =>
    Buffer.concat([
      frame(FrameType.HEADERS, Flag.END_HEADERS, id, NEXT_IDS),
      frame(FrameType.DATA, Flag.END_STREAM, id, body),
    ]);
  let connections = 0;
  let refused = 0;
  const sockets = new Set();
  const open = () => {
    if (Date.now() >= until) return;
    connections++;
    const socket = connect(port, '127.0.0.1');
    sockets.add(socket);
    let next = 1;
    let input = Buffer.alloc(0);
    const calls = (n) => {
      const parts = [];
      for (let i = 0; i < n && next < 2 ** 31 - 2; i++, next += 2) parts.push(call(next));
      socket.write(Buffer.concat(parts));
    };
    socket.on('error', () => undefined);
    socket.on('close', () => {
      sockets.delete(socket);
      open();
    });
    socket.on('data', (chunk) => {
      input = input.length > 0 ? Buffer.concat([input, chunk]) : chunk;
      let ended = 0;
      while (input.length >= 9) {
        const length = input.readUIntBE(0, 3);
        if (input.length < 9 + length) break;
        const [type, flags] = [input[3], input[4]];
        if ((type === FrameType.HEADERS || type === FrameType.DATA) && (flags & Flag.END_STREAM) !== 0) ended++;
        if (type === FrameType.RST_STREAM) {
          ended++;
          if (input.readUInt32BE(9) === ErrorCode.REFUSED_STREAM) refused++;
        }
        input = input.subarray(9 + length);
      }
      if (ended > 0) calls(ended);
    });
    socket.on('connect', () => {
      socket.write(Buffer.concat([PREFACE, settings]));
      calls(128);
    });
  };
  for (let i = 0; i < 300; i++) open();
  setTimeout(
    () => {
      for (const s of sockets) s.destroy();
      process.stdout.write(`${JSON.stringify({ connections, refused })}\n`);
      process.exit(0);
    },
    Math.max(0, until - Date.now()),
  );
}

const make = ATTACKS[name];
if (make === undefined && name !== 'zero-window') {
  process.stderr.write(`abuse-attacker: no attack named ${name}; known: ${Object.keys(ATTACKS).join(', ')}\n`);
  process.exit(2);
}

function once() {
  return new Promise((resolve) => {
    const attack = make();
    const socket = connect(port, '127.0.0.1');
    let open = true;
    const stopAt = setTimeout(() => socket.destroy(), Math.max(0, until - Date.now()));
    const finish = () => {
      if (!open) return;
      open = false;
      clearTimeout(stopAt);
      socket.destroy();
      resolve();
    };
    socket.on('error', finish);
    socket.on('close', finish);
    socket.on('data', () => undefined);
    socket.on('connect', () => {
      socket.write(Buffer.concat([PREFACE, frame(FrameType.SETTINGS, 0, 0), attack.opening ?? Buffer.alloc(0)]));
      // As fast as the socket takes it, yielding now and then so the attacker also reads (a kernel that takes every
      // write at once would otherwise keep this loop from ever seeing the server's GOAWAY).
      const more = () => {
        for (let i = 0; i < 16; i++) {
          if (!open || socket.destroyed) return;
          if (!socket.write(attack.chunk())) return; // 'drain' calls again
        }
        setImmediate(more);
      };
      socket.on('drain', more);
      more();
    });
  });
}

/** The other attacks: one connection at a time, a new one whenever the server cuts the last. */
async function oneAtATime() {
  let connections = 0;
  while (Date.now() < until) {
    connections++;
    await once();
  }
  process.stdout.write(`${JSON.stringify({ connections })}\n`);
}

if (name === 'zero-window') zeroWindow();
else void oneAtATime();
