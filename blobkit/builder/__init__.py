"""`blobkit build`: a world becomes a verified, byte-reproducible training kit.

    load ─► candidates (authored tasks, families, minted templates; each case's side decided once)
         ─► gate (every probe must fail, the reference must pass) ─► split ─► replay (executed rows) ─► write

One concept per module: :mod:`.config` (BuildConfig), :mod:`.mint` (templates instantiated on anchor
rows), :mod:`.family` (authored families), :mod:`.candidates`, :mod:`.gate` (the probes),
:mod:`.entities` (connected entities), :mod:`.sides` (which side an entity is on),
:mod:`.split` (cases on their sides), :mod:`.leakage` (the leakage report), :mod:`.rows` (executed SFT rows),
:mod:`.kit_files` (the kit's files and kit.json) and :mod:`.builder` (the driver).
"""

from __future__ import annotations

from .builder import BuiltKit, build_kit, execute_build, write_kit
from .config import BuildConfig, Progress
from .rows import case_record, replay_row

__all__ = ["BuildConfig", "BuiltKit", "Progress", "build_kit", "case_record", "execute_build", "replay_row",
           "write_kit"]
