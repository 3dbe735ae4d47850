#!/usr/bin/env python3
"""flood.py [--from ADDR] HOST PORT N KIND SECONDS [EVERY [SOURCE]]: open N TCP
connections to a foxd listener and hold them for SECONDS. KIND says what each
one does first: 0 stays silent, 1 completes the SP handshake as a REQ peer,
sub as a SUB peer (the events listener), slow sends an HTTP request line and
then one header byte every half second, never ending its headers (/metrics).
Prints how many connections the server closed within the time (for every
kind but 0). --from is the local address the N connect from.
With EVERY, one more connection (a REQ peer speaking the SP wire format
itself, so that it never reconnects behind our back) sends `version` every
EVERY seconds meanwhile, and the last line says how many of its requests
were answered on that one connection; SOURCE is the local address it
connects from (another loopback address than the flood's, say)."""
import socket
import struct
import sys
import time

SP_HEADERS = {"1": b"\x00SP\x00\x00\x30\x00\x00",  # SP header, protocol REQ0 (48)
              "sub": b"\x00SP\x00\x00\x21\x00\x00"}  # SUB0 (33)

args = sys.argv[1:]
flood_source = None
if args[:1] == ["--from"]:
    flood_source = (args[1], 0)
    args = args[2:]
host, port, n, kind, seconds = args[0], int(args[1]), int(args[2]), args[3], float(args[4])
every = float(args[5]) if len(args) > 5 else 0
source = (args[6], 0) if len(args) > 6 else None
if kind not in ("0", "1", "sub", "slow"):
    sys.exit(f"flood.py: KIND {kind!r}: want 0, 1, sub or slow")


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


def closed_by_server(s):
    """Whether the server closed s: end of file after whatever it sent, or an error."""
    s.setblocking(False)
    try:
        while True:
            if s.recv(4096) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


socks = []
for _ in range(n):
    try:
        s = socket.create_connection((host, port), timeout=2, source_address=flood_source)
        if kind in SP_HEADERS:
            s.sendall(SP_HEADERS[kind])
        elif kind == "slow":
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        socks.append(s)
    except OSError:
        pass
print(f"opened {len(socks)}", flush=True)
asked = answered = 0
end = time.monotonic() + seconds
if every > 0:
    # The server closes what it refuses of the flood as each finishes its handshake: let it,
    # so that the active client comes to a listener that has settled, as a later client would.
    if socks:
        time.sleep(1.0)
    active = socket.create_connection((host, port), timeout=5, source_address=source)
    active.sendall(SP_HEADERS["1"])
    recv_exact(active, 8)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        asked += 1
        try:
            answered += ask_version(active, asked)
        except OSError:
            break
        time.sleep(every)
elif kind == "slow":
    gone = set()
    while time.monotonic() < end:
        for i, s in enumerate(socks):
            if i not in gone:
                try:
                    s.send(b"x")
                except OSError:
                    gone.add(i)
        time.sleep(0.5)
else:
    time.sleep(seconds)
closed = sum(closed_by_server(s) for s in socks)
print(f"closed {closed}", flush=True)
if every > 0:
    print(f"active {answered}/{asked}", flush=True)
