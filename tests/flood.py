#!/usr/bin/env python3
"""flood.py HOST PORT N HANDSHAKE SECONDS [EVERY [SOURCE]]: open N TCP connections to
an nng listener and hold them for SECONDS; with HANDSHAKE=1 each one
completes the SP handshake as a REQ peer first, else it stays silent. Prints
how many connections the server closed within the time (handshake mode).
With EVERY, one more connection (a REQ peer speaking the SP wire format
itself, so that it never reconnects behind our back) sends `version` every
EVERY seconds meanwhile, and the last line says how many of its requests
were answered on that one connection; SOURCE is the local address it
connects from (another loopback address than the flood's, say)."""
import socket
import struct
import sys
import time

SP_HEADER = b"\x00SP\x00\x00\x30\x00\x00"  # SP header, protocol REQ0 (48)

host, port, n, handshake, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", float(sys.argv[5])
every = float(sys.argv[6]) if len(sys.argv) > 6 else 0
source = (sys.argv[7], 0) if len(sys.argv) > 7 else None


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        got = s.recv(n - len(buf))
        if not got:
            raise OSError("closed by the server")
        buf += got
    return buf


def ask_version(s, rid):
    """One request on an open REQ connection: 8-byte length, request id, body."""
    body = b'{"v":1,"id":%d,"cmd":"version"}' % rid
    s.sendall(struct.pack(">QI", 4 + len(body), 0x80000000 | rid) + body)
    length = struct.unpack(">Q", recv_exact(s, 8))[0]
    reply = recv_exact(s, length)
    return struct.unpack(">I", reply[:4])[0] == 0x80000000 | rid and b'"ok":true' in reply


socks = []
for _ in range(n):
    try:
        s = socket.create_connection((host, port), timeout=2)
        if handshake:
            s.sendall(SP_HEADER)
        socks.append(s)
    except OSError:
        pass
print(f"opened {len(socks)}", flush=True)
asked = answered = 0
if every > 0:
    # The server closes what it refuses of the flood as each finishes its handshake: let it,
    # so that the active client comes to a listener that has settled, as a later client would.
    if socks:
        time.sleep(1.0)
    active = socket.create_connection((host, port), timeout=5, source_address=source)
    active.sendall(SP_HEADER)
    recv_exact(active, 8)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        asked += 1
        try:
            answered += ask_version(active, asked)
        except OSError:
            break
        time.sleep(every)
else:
    time.sleep(seconds)
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        while True:
            if s.recv(64) == b"":  # the server's header, then end of file when it closed
                closed += 1
                break
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(f"closed {closed}", flush=True)
if every > 0:
    print(f"active {answered}/{asked}", flush=True)
