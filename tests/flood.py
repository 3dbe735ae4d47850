#!/usr/bin/env python3
"""flood.py HOST PORT N HANDSHAKE SECONDS: open N TCP connections to an nng
listener and hold them for SECONDS; with HANDSHAKE=1 each one completes the
SP handshake as a REQ peer first, else it stays silent. Prints how many
connections the server closed within the time (handshake mode)."""
import socket
import sys
import time

host, port, n, handshake, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", float(sys.argv[5])
socks = []
for _ in range(n):
    try:
        s = socket.create_connection((host, port), timeout=2)
        if handshake:
            s.sendall(b"\x00SP\x00\x00\x30\x00\x00")  # SP header, protocol REQ0 (48)
        socks.append(s)
    except OSError:
        pass
print(f"opened {len(socks)}", flush=True)
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
