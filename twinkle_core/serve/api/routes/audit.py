"""The audit log (admins)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import HTTPException, Query

from twinkle_core.serve.api.errors import resource_router
from twinkle_core.serve.api.schemas import AuditEntry
from twinkle_core.serve.deps import Caller, Svc, json_safe

router = resource_router()


@router.get("/audit", summary="The audit log (admins)", response_model=list[AuditEntry])
def audit(user: Caller, svc: Svc, limit: Annotated[int, Query(ge=1, le=10000)] = 200) -> list[dict[str, Any]]:
    """Every submit and cancel, newest first, with who, when and from where."""
    if not user.admin:
        raise HTTPException(403, "the audit log is for admins")
    return json_safe(svc.accounts.audit_log(limit))
