"""The base of trainers' typed records (plan.json, eval.json): strict, frozen, and absent sections left out."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Record(BaseModel):
    """Base of the records: frozen, unknown fields refused, docstrings as descriptions; the fields named in
    ``_omitted`` are left out of the JSON when they are None (the files never held them as null)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    _omitted: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def,unused-ignore]
        # no return annotation: pydantic then takes the serialization schema from the fields (Any would make it {})
        data = handler(self)
        for name in self._omitted:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    def to_json(self) -> dict[str, Any]:
        """The record as its file holds it."""
        return dict(self.model_dump(mode="json"))
