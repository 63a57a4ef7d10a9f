"""Request bodies read with a size limit: ``Content-Length`` is checked first, then the bytes as they arrive."""

from __future__ import annotations

from fastapi import Request

from blobkit.errors import PayloadTooLargeError

MIB = 1 << 20


async def read_limited(request: Request, limit: int, hint: str) -> bytes:
    """The whole body; PayloadTooLargeError (413, with ``hint``) past ``limit`` bytes, before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"the body is {int(declared)} bytes, more than the {limit} this route accepts; "
                                   f"{hint}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"the body is more than the {limit} bytes this route accepts; {hint}")
        chunks.append(chunk)
    return b"".join(chunks)
