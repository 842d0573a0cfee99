"""The regex helper process: run by path with ``python -I``; imports only RE2.

Reads requests from stdin and answers on stdout, one at a time:

- request: ``>I`` pattern length, the pattern (UTF-8), ``>Q`` text length, the text;
- answer: ``>q`` length of the match shown (``-1``: no match), then at most 4096 bytes of it.

The daemon kills it when a search overruns its deadline; end of stdin ends it.
"""

import struct
import sys
from typing import Any, BinaryIO

import re2

_MAX_MEM = 8 << 20  # as in _regex.py: what the daemon accepted compiles the same here
_SHOWN_BYTES = 4096


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError
    return data


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    compiled: dict[bytes, Any] = {}
    while True:
        try:
            (plen,) = struct.unpack(">I", _read(stdin, 4))
            pattern = _read(stdin, plen)
            (tlen,) = struct.unpack(">Q", _read(stdin, 8))
            text = _read(stdin, tlen)
        except EOFError:
            return
        regex = compiled.get(pattern)
        if regex is None:
            if len(compiled) > 64:
                compiled.clear()
            regex = compiled[pattern] = re2.compile(pattern, options)
        found = regex.search(text)
        shown = b"" if found is None else found.group(0)[:_SHOWN_BYTES]
        stdout.write(struct.pack(">q", -1 if found is None else len(shown)) + shown)
        stdout.flush()


if __name__ == "__main__":
    main()
