#!/usr/bin/env python3
"""journal_recv.py SOCKET OUT READY STOP: stand in for journald's native
socket. Bind a unix datagram socket at SOCKET, create the file READY, and
decode every datagram of the journal's native protocol into one JSON object
per line in OUT (the fields, plus _PID from the sender's credentials, as
journalctl -o json writes them), until the file STOP exists and no datagram
came for a moment. Fields are KEY=value lines, or KEY, a newline, the size
as a little-endian 64-bit integer, the bytes and a newline for values that
hold newlines; an entry too large for a datagram comes as a sealed memfd."""
import json
import os
import socket
import struct
import sys

path, out_path, ready_path, stop_path = sys.argv[1:5]
UCRED = struct.Struct("iII")  # pid, uid, gid


def parse(data):
    """The fields of one entry; raises ValueError on a malformed one."""
    fields, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            i = nl + 1
        else:
            key = line
            (size,) = struct.unpack_from("<Q", data, nl + 1)
            start = nl + 1 + 8
            value = data[start:start + size]
            if len(value) != size or data[start + size:start + size + 1] != b"\n":
                raise ValueError("binary field %r cut short" % key)
            i = start + size + 1
        fields[key.decode()] = value.decode("utf-8", "backslashreplace")
    return fields


sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
sock.bind(path)
sock.settimeout(0.2)
open(ready_path, "w").close()
with open(out_path, "w") as out:
    while True:
        try:
            data, anc, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(UCRED.size) +
                                           socket.CMSG_SPACE(4))
        except socket.timeout:
            if os.path.exists(stop_path):
                break
            continue
        pid = None
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = UCRED.unpack_from(payload)[0]
            elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fd = struct.unpack_from("i", payload)[0]
                data = os.pread(fd, os.fstat(fd).st_size, 0)
                os.close(fd)
        try:
            entry = parse(data)
        except (ValueError, struct.error) as e:
            entry = {"MALFORMED": str(e)}
        entry["_PID"] = str(pid)
        entry["_TRANSPORT"] = "journal"
        out.write(json.dumps(entry) + "\n")
        out.flush()
