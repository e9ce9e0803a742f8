"""Reading an HTTP request body with a size limit, for every endpoint that takes one."""
from fastapi import Request


async def read_limited(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it passes `limit` bytes (never buffering more)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
