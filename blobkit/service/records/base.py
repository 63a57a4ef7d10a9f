"""The base of the service records, the caller and the error shape."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Base of every service record: frozen, unknown fields refused, docstrings as descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Principal(Record):
    """Who a request is from: the workspace its API key belongs to."""

    workspace: str
    """The workspace; every record the request reads or writes belongs to it."""
    key_id: str
    """The key's public id (the 16 hex digits after ``tml-``)."""
    role: Literal["user", "worker"]
    """``user``: a person or script; ``worker``: a worker connection (may also claim and report jobs)."""
    worker_id: str | None = None
    """The worker this key belongs to (role ``worker`` only)."""


class ErrorDetail(Record):
    """What went wrong."""

    code: str
    """A stable machine-readable code (``unauthorized``, ``not_found``, ``unknown_base``, ``plane_not_trainable``…)."""
    message: str
    """One line: what is wrong, where, and how to fix it."""
    field: str | None = None
    """The request field at fault (a dotted path into the body), when one is."""
    accepted: list[str] | None = None
    """The accepted values, when the fault is a value outside a closed list (the base model catalog)."""


class ErrorBody(Record):
    """Every error response of the service has this one shape."""

    error: ErrorDetail
