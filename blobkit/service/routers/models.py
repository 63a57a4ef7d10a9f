"""``GET /api/v1/models``: the base models training jobs accept, and those the workspace's workers advertise."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ..auth import get_store, principal
from ..catalog import ModelsList, models_list
from ..http_errors import ERROR_RESPONSES
from ..records import Principal
from ..store import ServiceStore

router = APIRouter(tags=["models"], responses=ERROR_RESPONSES)


@router.get("/models", response_model=ModelsList, summary="Accepted base models")
def list_models(caller: Principal = Depends(principal), store: ServiceStore = Depends(get_store)) -> ModelsList:
    """The open-weight catalog (id, parameters, VRAM for LoRA at bf16 and 4k context) and, per worker of the
    caller's workspace, the bases it advertised when it last connected."""
    return models_list(store, caller.workspace)
