# -*- test-case-name: tests.test_binlog -*-
"""The on-disk format of the binlog: file header and checksummed records.

All integers are little-endian.  See docs/persistence.md for the prose version.

A binlog file ``binlog.<seq>`` starts with a 32-byte header::

    magic     8s  b"TSTALKBL"
    version   u32 1
    seq       u32 the file's sequence number (also in its name)
    next_id   u64 the engine's next job id when the file was created
    crc       u32 CRC-32 of the 24 bytes above
    (4 bytes of zero padding)

and is followed by records.  Every record is::

    mark      2s  b"\\xbe\\xa5" (lets recovery find the next record after damage)
    type      u8  PUT, UPDATE or DELETE
    flags     u8  MIGRATED for a PUT written by compaction
    length    u32 bytes of payload that follow (not counting the crc)
    payload   ...
    crc       u32 CRC-32 of mark..payload

PUT payload (a job's full state; also written by compaction, flag MIGRATED)::

    id u64, pri u32, delay u32, ttr u32, state u8, tube_len u8,
    deadline f64 (wall-clock time a delayed job becomes ready, else 0),
    created f64, reserves u32, timeouts u32, releases u32, buries u32, kicks u32,
    body_len u32, tube bytes, body bytes (with its trailing CRLF)

UPDATE payload (state change of a job whose PUT is earlier in the log)::

    id u64, pri u32, delay u32, state u8, deadline f64, 5 x u32 counters

DELETE payload::

    id u64

``state`` is READY (0), DELAYED (2) or BURIED (3): a reserved job is
recorded in the state it returns to after a restart (ready).
"""
from __future__ import annotations

import struct
from zlib import crc32

MAGIC = b"TSTALKBL"
VERSION = 1
FILE_HEADER = struct.Struct("<8sIIQI4x")
HEADER_SIZE = FILE_HEADER.size  # 32
_HEADER_CHECKED = struct.Struct("<8sIIQ")

MARK = b"\xbe\xa5"
T_PUT = 1
T_UPDATE = 2
T_DELETE = 3
F_MIGRATED = 1

REC_HEAD = struct.Struct("<2sBBI")  # mark, type, flags, payload length
HEAD_SIZE = REC_HEAD.size  # 8
PUT = struct.Struct("<2sBBIQIIIBBdd5II")
UPDATE = struct.Struct("<2sBBIQIIBd5I")
DELETE = struct.Struct("<2sBBIQ")
CRC = struct.Struct("<I")
CRC_SIZE = CRC.size

#: Bytes of a PUT record besides its tube name and body (header, fields, crc).
PUT_FIXED = PUT.size + CRC_SIZE
UPDATE_SIZE = UPDATE.size + CRC_SIZE
DELETE_SIZE = DELETE.size + CRC_SIZE
PUT_PAYLOAD_FIXED = PUT.size - HEAD_SIZE
UPDATE_PAYLOAD = UPDATE.size - HEAD_SIZE
DELETE_PAYLOAD = DELETE.size - HEAD_SIZE

#: beanstalkd's own binlog files start with its format version as a native int.
BEANSTALKD_VERSIONS = {i.to_bytes(4, "little") for i in range(1, 16)}


def file_header(seq: int, next_id: int) -> bytes:
    head = _HEADER_CHECKED.pack(MAGIC, VERSION, seq, next_id)
    return FILE_HEADER.pack(MAGIC, VERSION, seq, next_id, crc32(head))


def read_file_header(data: bytes):
    """``(ok, magic_like, seq, next_id)`` for the first HEADER_SIZE bytes of ``data``.

    ``magic_like`` is true when the magic is recognisably ours (at most two
    bytes differ), so a damaged header can be told from a foreign file.
    """
    magic, version, seq, next_id, crc = FILE_HEADER.unpack_from(data, 0)
    ok = (magic == MAGIC and version == VERSION
          and crc == crc32(data[:_HEADER_CHECKED.size]))
    differing = sum(1 for a, b in zip(magic, MAGIC) if a != b)
    return ok, differing <= 2, seq, next_id


def put_record(job_id: int, pri: int, delay: int, ttr: int, state: int,
               deadline: float, created: float, counts, tube: bytes,
               body: bytes, flags: int = 0) -> bytes:
    """One PUT record (used by tests and tools; the writer inlines this)."""
    c = counts or (0, 0, 0, 0, 0)
    head = PUT.pack(MARK, T_PUT, flags, PUT_PAYLOAD_FIXED + len(tube) + len(body),
                    job_id, pri, delay, ttr, state, len(tube), deadline, created,
                    c[0], c[1], c[2], c[3], c[4], len(body))
    return head + tube + body + CRC.pack(crc32(body, crc32(tube, crc32(head))))


def update_record(job_id: int, pri: int, delay: int, state: int, deadline: float,
                  counts) -> bytes:
    c = counts or (0, 0, 0, 0, 0)
    rec = UPDATE.pack(MARK, T_UPDATE, 0, UPDATE_PAYLOAD, job_id, pri, delay, state,
                      deadline, c[0], c[1], c[2], c[3], c[4])
    return rec + CRC.pack(crc32(rec))


def delete_record(job_id: int) -> bytes:
    rec = DELETE.pack(MARK, T_DELETE, 0, DELETE_PAYLOAD, job_id)
    return rec + CRC.pack(crc32(rec))


def file_name(seq: int) -> str:
    return f"binlog.{seq}"


def parse_file_name(name: str):
    """The sequence number of ``binlog.<n>``, or None for any other name."""
    if name.startswith("binlog.") and name[7:].isdigit() and name[7:8] != "0":
        return int(name[7:])
    return None
