// Child process for abuse-serving.spec.ts: attacks on the serving path above the frame level, from a
// process of its own (the test's probe client must not share its event loop). Runs one named attack against
// 127.0.0.1:PORT for DURATION ms with PARALLEL connections at once, each reopened whenever the server cuts it,
// then prints one JSON line ({"connections":N,...}) and exits.
// Plain JavaScript over the built @idgen/h2 (the server's test target builds it first).
'use strict';
const { connect } = require('node:net');
const { frame } = require('./attack-frames.js');
const { encodeHeaders, Flag, FrameType, PREFACE } = require('@idgen/h2');

const [name, portText, durationText, parallelText] = process.argv.slice(2);
const port = Number(portText);
const started = Date.now();
const until = started + Number(durationText);
const parallel = Number(parallelText ?? 1);

const stats = { connections: 0, cut: 0, oldestOpenMs: 0, bytesAccepted: 0, streamsOpened: 0 };

/**
 * One connection of `attack`: resolves when the server cut it (counted in `cut`) or the attack is over. `attack`
 * gets the socket and a function `cut()` telling whether it is over, and starts sending on 'connect'.
 */
function once(attack) {
  return new Promise((resolve) => {
    stats.connections++;
    const socket = connect(port, '127.0.0.1');
    const openedAt = Date.now();
    let open = true;
    const stopAt = setTimeout(
      () => {
        if (!open) return;
        open = false;
        stats.oldestOpenMs = Math.max(stats.oldestOpenMs, Date.now() - openedAt);
        socket.destroy();
        resolve();
      },
      Math.max(0, until - Date.now()),
    );
    const finish = () => {
      if (!open) return;
      open = false;
      clearTimeout(stopAt);
      stats.cut++;
      socket.destroy();
      resolve();
    };
    socket.on('error', finish);
    socket.on('close', finish);
    attack(socket, () => !open);
  });
}

/** Writes `next()` as fast as the socket takes it, yielding now and then; each chunk the kernel took is counted. */
function flood(socket, over, next) {
  const more = () => {
    for (let i = 0; i < 16; i++) {
      if (over() || socket.destroyed) return;
      const chunk = next();
      const ok = socket.write(chunk, (err) => {
        if (!err) stats.bytesAccepted += chunk.length;
      });
      if (!ok) return; // 'drain' calls again
    }
    setImmediate(more);
  };
  socket.on('drain', more);
  more();
}

const PIPELINED = Buffer.from('GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n'.repeat(256));
const CHUNK = Buffer.concat([Buffer.from('10000\r\n'), Buffer.alloc(0x10000, 0x61), Buffer.from('\r\n')]);
const GET_STATUS = encodeHeaders([
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/idgen.v1.IdGenerator/GetStatus'],
  [':authority', 'a'],
  ['content-type', 'application/grpc'],
  ['te', 'trailers'],
]);

const ATTACKS = {
  // HTTP/1.1 slowloris that never reads: pipelined requests as fast as the server takes them, no answer ever read.
  'h1-no-read': (socket, over) => {
    socket.pause();
    socket.on('connect', () => flood(socket, over, () => PIPELINED));
  },
  // An endless chunked body to /healthz, answers read (and dropped).
  'h1-endless-body': (socket, over) => {
    socket.on('data', () => undefined);
    socket.on('connect', () => {
      socket.write('POST /healthz HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n');
      flood(socket, over, () => CHUNK);
    });
  },
  // 128 GetStatus calls held open (HEADERS, no body) on each connection; each one the server ends is replaced.
  'held-calls': (socket, over) => {
    let nextId = 1;
    const open = (n) => {
      const frames = [];
      for (let i = 0; i < n; i++) {
        frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS, nextId, GET_STATUS));
        nextId += 2;
      }
      stats.streamsOpened += n;
      if (!over() && !socket.destroyed) socket.write(Buffer.concat(frames));
    };
    let input = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      input = input.length === 0 ? chunk : Buffer.concat([input, chunk]);
      let ended = 0;
      const replies = [];
      while (input.length >= 9) {
        const length = input.readUIntBE(0, 3);
        if (input.length < 9 + length) break;
        const type = input[3];
        const flags = input[4];
        if (type === FrameType.RST_STREAM) ended++;
        else if (type === FrameType.HEADERS && (flags & Flag.END_STREAM) !== 0) ended++;
        else if (type === FrameType.DATA && (flags & Flag.END_STREAM) !== 0) ended++;
        else if (type === FrameType.SETTINGS && (flags & Flag.ACK) === 0)
          replies.push(frame(FrameType.SETTINGS, Flag.ACK, 0));
        else if (type === FrameType.PING && (flags & Flag.ACK) === 0)
          replies.push(frame(FrameType.PING, Flag.ACK, 0, input.subarray(9, 17)));
        input = input.subarray(9 + length);
      }
      if (replies.length > 0 && !socket.destroyed) socket.write(Buffer.concat(replies));
      if (ended > 0) open(ended);
    });
    socket.on('connect', () => {
      socket.write(Buffer.concat([PREFACE, frame(FrameType.SETTINGS, 0, 0)]));
      open(128);
    });
  },
};

const attack = ATTACKS[name];
if (attack === undefined) {
  process.stderr.write(`abuse-serving-attacker: no attack named ${name}; known: ${Object.keys(ATTACKS).join(', ')}\n`);
  process.exit(2);
}

(async () => {
  const lane = async () => {
    while (Date.now() < until) await once(attack);
  };
  await Promise.all(Array.from({ length: parallel }, lane));
  process.stdout.write(`${JSON.stringify(stats)}\n`);
})();
