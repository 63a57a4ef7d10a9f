"""Large artifacts (worlds, kits, exports, evidence) stored content-addressed on disk beside the database.

``DIR/blobs/<first two hex>/<sha256>``: written to a temporary file in the same folder, hashed while
written, checked against the sha256 and size the uploader declared (if any), fsynced and renamed into
place, then the folder fsynced. A blob that already exists is not written twice. Nothing partial is ever
visible under its final name.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from blobkit.errors import NotFoundError, PayloadTooLargeError, UploadChecksumError
from world_format.canonical import fsync_dir

SHA256 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 20


@dataclass(frozen=True)
class BlobRef:
    """A stored blob: its sha256 and size in bytes."""

    sha256: str
    bytes: int


class BlobStore:
    """The content-addressed files of one service store."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        """Where a blob lives (whether or not it exists)."""
        if not SHA256.match(sha256):
            raise NotFoundError(f"{sha256!r} is not a sha256 (64 lowercase hex digits)")
        return self.root / sha256[:2] / sha256

    def existing(self, sha256: str) -> Path:
        """The path of a stored blob; NotFoundError when it is missing."""
        path = self.path(sha256)
        if not path.is_file():
            raise NotFoundError(f"blob {sha256} is not in the store")
        return path

    def put_chunks(self, chunks: Iterable[bytes], *, expected_sha256: str | None = None,
                   expected_bytes: int | None = None, max_bytes: int | None = None) -> BlobRef:
        """Store the concatenated ``chunks``; refuse (writing nothing) a size or sha256 other than declared."""
        if expected_sha256 is not None and not SHA256.match(expected_sha256):
            raise UploadChecksumError(f"declared sha256 {expected_sha256!r} is not 64 lowercase hex digits")
        hasher, size = hashlib.sha256(), 0
        handle, name = tempfile.mkstemp(prefix=".incoming-", dir=self.root)
        try:
            with os.fdopen(handle, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:
                        raise PayloadTooLargeError(f"upload is larger than {max_bytes} bytes")
                    hasher.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = hasher.hexdigest()
            if expected_bytes is not None and size != expected_bytes:
                raise UploadChecksumError(f"upload has {size} bytes, {expected_bytes} were declared; nothing stored")
            if expected_sha256 is not None and digest != expected_sha256:
                raise UploadChecksumError(f"upload has sha256 {digest}, {expected_sha256} was declared; "
                                          "nothing stored (the file changed on the way: send it again)")
            final = self.path(digest)
            final.parent.mkdir(exist_ok=True)
            if final.is_file():
                os.unlink(name)
            else:
                os.replace(name, final)
                fsync_dir(final.parent)
            return BlobRef(digest, size)
        except BaseException:
            if os.path.exists(name):
                os.unlink(name)
            raise

    def put_bytes(self, data: bytes, **expected: int | str | None) -> BlobRef:
        """Store ``data`` (see :meth:`put_chunks`)."""
        return self.put_chunks([data], **expected)  # type: ignore[arg-type]

    def put_file(self, path: Path) -> BlobRef:
        """Store a copy of the file at ``path``."""
        with open(path, "rb") as handle:
            return self.put_chunks(iter(lambda: handle.read(CHUNK), b""))
