"""nkicc's cache entry format: bytes, never a pickle.

    b"nkicc-cache <format> <kind> <codec> <blake2b-256 of body, hex> <len(body)>\\n" + body
    body = codec( meta JSON + "\\n" + IR JSON ),  codec: "json" (as is) or "zlib" (over 4 KiB)

`meta` is plain JSON ({"key": ..., ...}); the IR part (may be empty) is the
`nkicc.ir.serialize` form of the IR as a table of its distinct nodes. `unpack` checks the header, the length, the checksum and
that the entry belongs to the key asked for; anything wrong raises
CorruptEntry, which the cache counts, evicts and treats as a miss.
"""
from __future__ import annotations

import hashlib
import json
import zlib

from nkicc.ir import serialize

FORMAT = 1
MAGIC = b"nkicc-cache"
COMPRESS_OVER = 4096


class CorruptEntry(Exception):
    pass


def _checksum(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=32).hexdigest()


def pack(kind: str, key: str, meta: dict, ir=None) -> bytes:
    """An entry: `meta` (JSON-able; gets the key added) and an optional IR
    node, stored as a table of its distinct nodes (serialize.dumps_table)."""
    text = json.dumps({**meta, "key": key, "kind": kind}, separators=(",", ":"))
    if ir is not None:
        text += "\n" + serialize.dumps_table(ir)
    raw = text.encode()
    codec = b"zlib" if len(raw) > COMPRESS_OVER else b"json"
    body = zlib.compress(raw, 1) if codec == b"zlib" else raw
    head = b"%s %d %s %s %s %d\n" % (MAGIC, FORMAT, kind.encode(), codec, _checksum(body).encode(), len(body))
    return head + body


def unpack(blob, kind: str, key: str) -> tuple[dict, object]:
    """(meta, IR node or None) of an entry, or CorruptEntry."""
    try:
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise CorruptEntry(f"entry is a {type(blob).__name__}, not bytes")
        blob = bytes(blob)
        nl = blob.find(b"\n", 0, 256)
        if nl < 0:
            raise CorruptEntry("no header")
        parts = blob[:nl].split(b" ")
        if len(parts) != 6 or parts[0] != MAGIC:
            raise CorruptEntry("bad header")
        if int(parts[1]) != FORMAT:
            raise CorruptEntry(f"format {parts[1].decode(errors='replace')}, this nkicc reads {FORMAT}")
        if parts[2].decode() != kind:
            raise CorruptEntry(f"a {parts[2].decode(errors='replace')} entry where a {kind} entry was expected")
        codec = parts[3]
        if codec not in (b"json", b"zlib"):
            raise CorruptEntry("unknown codec")
        body = blob[nl + 1:]
        if len(body) != int(parts[5]):
            raise CorruptEntry(f"truncated: {len(body)} of {int(parts[5])} bytes")
        if _checksum(body) != parts[4].decode():
            raise CorruptEntry("checksum mismatch")
        text = (zlib.decompress(body) if codec == b"zlib" else body).decode()
        meta_text, _, ir_text = text.partition("\n")
        meta = json.loads(meta_text)
        if meta.get("key") != key or meta.get("kind") != kind:
            raise CorruptEntry("entry belongs to another key")
        ir = serialize.loads_table(ir_text) if ir_text else None
        return meta, ir
    except CorruptEntry:
        raise
    except Exception as exc:  # anything unreadable is corrupt, whatever the reason
        raise CorruptEntry(f"{type(exc).__name__}: {exc}") from None
