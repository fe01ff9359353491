"""Python h2's verdict on request header blocks, for the differential spec (src/field-rules.differential.spec.ts).

Reads a JSON array of cases on stdin, each {"fields": [[name, value], ...], "endStream": bool} with names and
values as latin1 strings (one char per octet). For each, encodes the fields with hpack, feeds a server-side
h2.connection.H2Connection (validate_inbound_headers=True) the client preface, an empty SETTINGS and one HEADERS
frame on stream 1, and reports whether it took the request (a RequestReceived event) or refused it (ProtocolError
raised, or a StreamReset / no request). Writes a JSON array of {"ok": bool, "why": str, "block": base64} (the
HPACK block sent, so the spec feeds the very same bytes to @idgen/h2's decoder).

Debian: apt-get install -y python3-h2 python3-hpack.
"""
import base64
import json
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def verdict(case):
    fields = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in case["fields"]]
    block = hpack.Encoder().encode(fields, huffman=True)
    config = h2.config.H2Configuration(
        client_side=False, validate_inbound_headers=True, normalize_inbound_headers=False, header_encoding=None
    )
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    flags = 0x4 | (0x1 if case["endStream"] else 0)  # END_HEADERS, END_STREAM
    data = PREFACE + frame(0x4, 0, 0, b"") + frame(0x1, flags, 1, block)
    encoded = base64.b64encode(block).decode("ascii")
    try:
        events = conn.receive_data(data)
    except h2.exceptions.ProtocolError as e:
        return {"ok": False, "why": "%s: %s" % (type(e).__name__, e), "block": encoded}
    for event in events:
        if isinstance(event, h2.events.StreamReset):
            return {"ok": False, "why": "StreamReset %r" % event.error_code, "block": encoded}
        if isinstance(event, h2.events.RequestReceived):
            return {"ok": True, "why": "", "block": encoded}
    return {"ok": False, "why": "no RequestReceived", "block": encoded}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--version":
        print(json.dumps({"h2": h2.__version__, "hpack": hpack.__version__}))
        return
    cases = json.load(sys.stdin)
    json.dump([verdict(case) for case in cases], sys.stdout)


main()
