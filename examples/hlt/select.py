#!/usr/bin/env python3
"""An example HLT for Tessera's FU, speaking the protocol of docs/hlt-contract.md.

Selection rule, on each event's number (from its trigger fragment, FED 1024, else from the
FRD header):
    Physics  if event number % 2 == 0
    Express  if event number % 10 == 0
    rejected ("-") otherwise.

It reads the raw files itself: a RAW_0002 header (docs/formats.md §5), then FRD v5/v6 records
(section 4), each payload walked backwards through its FED fragments' 8-byte SLINK trailers
(section 1) to find the trigger fragment and read its trigger type and BX (section 3).

Environment:
    TESSERA_HLT_CRASH_EVENT=<n>  exit with status 3 on reaching event n (tests failure handling)
    TESSERA_HLT_VERBOSE=1        print each event's trigger type and BX on standard error
    TESSERA_HLT_FILE_DELAY_MS=<n> take n ms more over each file, as a slow selection would
                                 (tests of an FU killed while it works on a file)
Standard library only.
"""
import os
import struct
import sys
import time

STREAMS = ["Physics", "Express"]
TCDS_FEDS = range(1024, 1100)
CRASH_EVENT = os.environ.get("TESSERA_HLT_CRASH_EVENT")
VERBOSE = os.environ.get("TESSERA_HLT_VERBOSE") == "1"
FILE_DELAY_S = int(os.environ.get("TESSERA_HLT_FILE_DELAY_MS", "0")) / 1000


def records(data):
    """Yields (frd event number, payload) for each whole FRD record of a raw file."""
    if data[:8] != b"RAW_0002":
        raise ValueError("not a RAW_0002 file")
    (at,) = struct.unpack_from("<H", data, 8)  # header size, 32
    while at + 24 <= len(data):
        version, = struct.unpack_from("<H", data, at)
        if version not in (5, 6):
            return
        _run, _ls, event, size, _crc = struct.unpack_from("<5I", data, at + 4)
        if at + 24 + size > len(data):
            return  # truncated: the FU does not need it
        yield event, data[at + 24 : at + 24 + size]
        at += 24 + size


def fragments(payload):
    """Yields the FED fragments of an event payload, last first, walking back by trailers."""
    end = len(payload)
    while end >= 16:
        (trailer,) = struct.unpack_from("<Q", payload, end - 8)
        words = (trailer >> 32) & 0xFFFFFF
        if trailer >> 60 != 0xA or words < 2 or words * 8 > end:
            return  # not a trailer: stop, the event is judged on what was found
        yield payload[end - words * 8 : end]
        end -= words * 8


def trigger_info(payload):
    """(event number, trigger type, BX) from the trigger fragment, or None without one."""
    for frag in fragments(payload):
        (header,) = struct.unpack_from("<Q", frag, 0)
        if (header >> 8) & 0xFFF in TCDS_FEDS and len(frag) >= 104:
            trigger_type = (header >> 56) & 0xF  # FED header event type
            (bx,) = struct.unpack_from("<H", frag, 80)
            (event,) = struct.unpack_from("<Q", frag, 96)
            return event, trigger_type, bx
    return None


def select(event):
    """The stream names of an event number, or "-"."""
    chosen = []
    if event % 2 == 0:
        chosen.append("Physics")
    if event % 10 == 0:
        chosen.append("Express")
    return ",".join(chosen) or "-"


def judge_file(path, skip, out):
    with open(path, "rb") as f:
        data = f.read()
    time.sleep(FILE_DELAY_S)
    for index, (frd_event, payload) in enumerate(records(data)):
        if index < skip:
            continue
        info = trigger_info(payload)
        event = info[0] if info else frd_event
        if CRASH_EVENT is not None and event == int(CRASH_EVENT):
            out.flush()
            sys.exit(3)
        if VERBOSE and info:
            print(f"event {event}: trigger type {info[1]}, BX {info[2]}", file=sys.stderr)
        out.write(f"{frd_event} {select(event)}\n")  # answers carry the FRD header's number
    out.write("END\n")
    out.flush()


def main():
    out = sys.stdout
    out.write("STREAMS " + ",".join(STREAMS) + "\n")
    out.flush()
    for line in sys.stdin:  # ends when the FU closes our standard input
        command, _, rest = line.rstrip("\n").partition(" ")
        if command != "FILE":
            print(f"select.py: unknown command {command!r}", file=sys.stderr)
            return 2
        skip, _, path = rest.partition(" ")
        judge_file(path, int(skip), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
