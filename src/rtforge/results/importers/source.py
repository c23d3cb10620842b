"""The file being imported, read the way rtforge must read a file it did not
write: only a regular file (a FIFO would block forever, /dev/zero never
ends), never more than ``MAX_IMPORT_BYTES``, and streamed -- a 208 MB
histogram is read line by line, never held as one string.

Text must be UTF-8 (or UTF-16 with a byte order mark: PowerShell's ``>``);
``check_text`` finds the first NUL byte or undecodable byte and names its
line before any parsing starts.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ...errors import UserError
from ..store.runfolder import MAX_IMPORT_BYTES

EXPECTED = ("cyclictest's text output, its --json file, the time,core1,... CSV made from its histogram, or rtla "
            "timerlat hist or top output")

# cyclictest's lines are short; a longer one is not its output (or not text).
MAX_LINE_BYTES = 1 << 20
# its --json file is read whole; it lists non-empty buckets only
MAX_JSON_BYTES = 256 << 20
CHUNK = 1 << 20
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def open_input(path: Path) -> BinaryIO:
    """A regular file opened for reading; UserError for anything else."""
    name = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{name}: no such file; give the path of a cyclictest output to import") from None
    except IsADirectoryError:
        raise UserError(f"{name} is a directory; give the path of one cyclictest output file") from None
    except PermissionError:
        raise UserError(f"{name}: permission denied; make the file readable or import a copy of it") from None
    except OSError as e:
        try:
            special = not stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            special = False
        if special:  # a socket (ENXIO) or a device without a driver
            raise UserError(f"{name} is not a regular file (a device, FIFO or socket); save the output to a file "
                            "and import that") from None
        raise UserError(f"{name}: cannot read it ({e.strerror or e}); check the path") from None
    st = os.fstat(fd)
    problem = None
    if stat.S_ISDIR(st.st_mode):
        problem = f"{name} is a directory; give the path of one cyclictest output file"
    elif not stat.S_ISREG(st.st_mode):
        problem = (f"{name} is not a regular file (a device, FIFO or socket); save the output to a file "
                   "and import that")
    elif st.st_size > MAX_IMPORT_BYTES:
        problem = (f"{name} is {st.st_size / 2**30:.1f} GiB, larger than any cyclictest output "
                   f"({MAX_IMPORT_BYTES >> 30} GiB at most); it is not one")
    if problem:
        os.close(fd)
        raise UserError(problem)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def copy_and_hash(src: BinaryIO, dest: Path, name: str) -> str:
    """Copy src to dest (a new file), checking it is text on the way; its sha256."""
    h = hashlib.sha256()
    checker = TextCheck(name)
    total = 0
    try:
        with open(dest, "xb") as out:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                total += len(chunk)
                if total > MAX_IMPORT_BYTES:  # it grew while being read
                    raise UserError(f"{name} is larger than any cyclictest output "
                                    f"({MAX_IMPORT_BYTES >> 30} GiB at most); it is not one")
                h.update(chunk)
                checker.feed(chunk)
                out.write(chunk)
            checker.end()
            out.flush()
            os.fsync(out.fileno())
    except OSError as e:
        if e.errno in (errno.EIO,) and total == 0:
            raise UserError(f"{name}: cannot read it ({e.strerror}); check the disk") from None
        raise
    return h.hexdigest()


class TextCheck:
    """Fed a file chunk by chunk, raises UserError at its first NUL byte or
    byte that is not UTF-8 (or UTF-16 after a byte order mark), naming the line."""

    def __init__(self, name: str):
        self.name = name
        self.lines_before = 0   # newlines in the chunks already fed
        self.head = b""
        self.decoder: codecs.BufferedIncrementalDecoder | None = None
        self.blank = True

    def _line(self, chunk: bytes, offset: int) -> int:
        return self.lines_before + chunk.count(b"\n", 0, max(0, offset)) + 1

    def feed(self, chunk: bytes) -> None:
        if self.decoder is None:
            self.head += chunk
            if len(self.head) < 2:
                return
            chunk, self.head = self.head, b""
            utf16 = chunk.startswith(UTF16_BOMS)
            self.decoder = codecs.getincrementaldecoder("utf-16" if utf16 else "utf-8")("strict")
            self.utf16 = utf16
        if not self.utf16:
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise UserError(f"{self.name}:{self._line(chunk, nul)}: binary data (a NUL byte), not text; "
                                f"expected {EXPECTED}")
        try:
            text = self.decoder.decode(chunk)
        except UnicodeDecodeError as e:
            self._bad(chunk, e)
        if self.blank and text.strip():
            self.blank = False
        if self.utf16 and "\0" in text:
            raise UserError(f"{self.name}:{self.lines_before + text[:text.index(chr(0))].count(chr(10)) + 1}: "
                            f"binary data (a NUL character), not text; expected {EXPECTED}")
        self.lines_before += text.count("\n") if self.utf16 else chunk.count(b"\n")

    def _bad(self, chunk: bytes, e: UnicodeDecodeError):
        if self.utf16:
            raise UserError(f"{self.name}:{self.lines_before + 1}: starts like UTF-16 text but is not; "
                            f"expected {EXPECTED}") from None
        # the decoder keeps up to 3 bytes of an unfinished character from the chunk before
        offset = max(0, e.start - (len(e.object) - len(chunk)))
        byte = e.object[e.start]
        raise UserError(f"{self.name}:{self._line(chunk, offset)}: not UTF-8 text (byte 0x{byte:02x}); "
                        f"expected {EXPECTED}") from None

    def end(self) -> None:
        if self.decoder is None:
            if self.head:
                self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
                self.utf16 = False
                chunk, self.head = self.head, b""
                self.feed(chunk)
            else:
                raise UserError(f"{self.name}:1: the file is empty; expected {EXPECTED}")
        try:
            self.decoder.decode(b"", final=True)
        except UnicodeDecodeError as e:
            self._bad(b"", e)
        if self.blank:
            raise UserError(f"{self.name}:1: the file is empty; expected {EXPECTED}")


class Source:
    """The file being imported: its name as the user gave it, read as lines."""

    def __init__(self, name: str, opener: Callable[[], BinaryIO]):
        self.name = name
        self._open = opener
        self._text: str | None = None

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> Source:
        return cls(name, lambda: io.BytesIO(data))

    @classmethod
    def from_path(cls, name: str, path: Path) -> Source:
        return cls(name, lambda: open(path, "rb"))

    def error(self, line: int, what: str) -> UserError:
        return UserError(f"{self.name}:{line}: {what}")

    def prefix(self, size: int = 4096) -> str:
        """The file's first bytes as text (for telling formats apart)."""
        with self._open() as f:
            raw = f.read(size)
        if raw.startswith(UTF16_BOMS):
            return raw.decode("utf-16", "ignore")
        return raw.decode("utf-8", "ignore").lstrip("\ufeff")

    def lines(self) -> Iterator[tuple[int, str]]:
        """(line number, text without its end) for every line; numbers count
        newlines, as editors and grep -n do (a lone CR does not start one)."""
        with self._open() as f:
            if f.read(2) in UTF16_BOMS:
                f.seek(0)
                stream = io.TextIOWrapper(f, encoding="utf-16", errors="replace", newline="\n")
                reader = iter(lambda: stream.readline(MAX_LINE_BYTES + 1), "")
            else:
                f.seek(0)
                reader = (b.decode("utf-8", "replace") for b in iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""))
            for no, line in enumerate(reader, 1):
                if len(line) > MAX_LINE_BYTES:
                    raise self.error(no, "the line is over 1 MiB long, which no cyclictest output has; "
                                         f"expected {EXPECTED}")
                if no == 1:
                    line = line.lstrip("\ufeff")
                line = line.rstrip("\r\n")
                if "\r" in line:  # a carriage return inside a line: a terminal redraw
                    for part in line.split("\r"):
                        yield no, part
                else:
                    yield no, line

    def text(self) -> str:
        """The whole file as one string (the --json reader), bounded."""
        if self._text is None:
            self._text = self._read_text()
        return self._text

    def _read_text(self) -> str:
        with self._open() as f:
            raw = f.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise self.error(1, f"a --json file over {MAX_JSON_BYTES >> 20} MB is not one cyclictest writes")
        if raw.startswith(UTF16_BOMS):
            return raw.decode("utf-16", "replace")
        return raw.decode("utf-8", "replace").lstrip("\ufeff")
