"""Files in and out over HTTP: a blob streamed to the client with ``X-Content-SHA256``, an upload streamed into
the blob store with its declared sha256 checked on arrival."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fastapi import Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from blobkit.errors import PayloadTooLargeError, UploadChecksumError

from .blobs import CHUNK, BlobRef
from .store import ServiceStore

SHA_HEADER = "X-Content-SHA256"
MAX_ARTIFACT_BYTES = 4 << 30
"""Largest upload accepted (4 GiB: a LoRA export of an 8B base with its evidence fits many times)."""


def file_response(path: str, sha256: str, filename: str, media_type: str = "application/octet-stream") -> FileResponse:
    """The file, with its sha256 in X-Content-SHA256 (FileResponse sets Content-Length)."""
    return FileResponse(path, media_type=media_type, filename=filename, headers={SHA_HEADER: sha256})


async def receive_upload(request: Request, store: ServiceStore, max_bytes: int = MAX_ARTIFACT_BYTES) -> BlobRef:
    """Stream the body to disk, then store it as a blob if its sha256 (and Content-Length) match the declared."""
    declared = request.headers.get(SHA_HEADER)
    if not declared:
        raise UploadChecksumError(f"an upload needs a {SHA_HEADER} header with the file's sha256")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise PayloadTooLargeError(f"the upload is {length} bytes, more than the {max_bytes} accepted")
    handle, name = tempfile.mkstemp(prefix=".upload-", dir=store.blobs.root)
    try:
        size = 0
        with os.fdopen(handle, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLargeError(f"the upload is more than the {max_bytes} bytes accepted")
                out.write(chunk)
        expected = int(length) if length is not None and length.isdigit() else None

        def store_it() -> BlobRef:
            with open(name, "rb") as source:
                return store.blobs.put_chunks(iter(lambda: source.read(CHUNK), b""), expected_sha256=declared.lower(),
                                              expected_bytes=expected)

        return await run_in_threadpool(store_it)
    finally:
        Path(name).unlink(missing_ok=True)
