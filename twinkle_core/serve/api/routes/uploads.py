"""Uploads: data sent to the server for jobs to train on."""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import HTTPException, Request
from fastapi import Path as PathParam

from twinkle_core.serve.api.errors import resource_router
from twinkle_core.serve.api.schemas import Upload, UploadEntry
from twinkle_core.serve.deps import Caller, Svc, client_address
from twinkle_core.serve.uploads import UPLOAD_NAME

UploadName = Annotated[str, PathParam(pattern=UPLOAD_NAME.pattern,
                                      description="letters, digits, '.', '_' and '-' (an archive: .zip, .tar, .tgz)")]
"""An upload's name in the path."""

router = resource_router()


@router.put("/uploads/{name}", status_code=201, summary="Upload data (a file or an archive)",
            response_model=Upload,
            max_body_size=1 << 40,  # the upload's own cap (max_upload_bytes) applies while it streams in
            openapi_extra={"requestBody": {"required": True, "description": "the file's bytes, sent as they are",
                                           "content": {"application/octet-stream": {
                                               "schema": {"type": "string", "format": "binary", "minLength": 1}}}}})
async def upload(name: UploadName, http: Request, user: Caller, svc: Svc) -> dict[str, Any]:
    """Send the raw file as the body. ``.zip``, ``.tar``, ``.tar.gz`` and ``.tgz`` are unpacked into a folder
    of the archive's stem. Returns ``data``: the server-side path to submit jobs on (yours alone). Larger than
    the server's ``max_upload_bytes``: 413."""
    from starlette.concurrency import run_in_threadpool

    from twinkle_core.serve.uploads import UploadTooLarge, place, receive, target_name, uploads_dir

    target_name(name)  # a bad name is refused before a byte is read
    folder = uploads_dir(svc.config.home, user.name)
    limit = svc.config.max_upload_bytes
    if int(http.headers.get("content-length") or 0) > limit:
        raise HTTPException(413, f"the upload is larger than this server's limit of {limit} bytes")
    try:
        received, size = await receive(http.stream(), folder, limit)
        if size == 0:
            os.remove(received)
            raise HTTPException(400, "the upload is empty: send the file's bytes as the body")
        path = await run_in_threadpool(place, received, name, folder, limit)
    except UploadTooLarge as err:
        raise HTTPException(413, str(err)) from None
    svc.accounts.audit(user.name, "upload", None, client_address(http), name=name, bytes=size)
    return {"name": os.path.basename(path), "data": path, "bytes": size}


@router.get("/uploads", summary="Your uploads", response_model=list[UploadEntry])
def uploads(user: Caller, svc: Svc) -> list[dict[str, Any]]:
    """Each upload's name, server-side path (``data`` for a job), kind and size."""
    from twinkle_core.serve.uploads import list_uploads

    return list_uploads(svc.config.home, user.name)


@router.delete("/uploads/{name}", status_code=204, summary="Delete an upload")
def delete_upload(name: UploadName, http: Request, user: Caller, svc: Svc) -> None:
    """Remove one of your uploads (jobs that already ran on it keep their runs)."""
    import shutil

    from twinkle_core.serve.uploads import UPLOAD_NAME, uploads_dir

    folder = uploads_dir(svc.config.home, user.name)
    path = os.path.join(folder, name)
    if not UPLOAD_NAME.match(name) or not os.path.lexists(path):
        raise HTTPException(404, f"no upload '{name}'")
    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    svc.accounts.audit(user.name, "delete upload", None, client_address(http), name=name)
