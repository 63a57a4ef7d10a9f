"""The Tinker-compatible training API of ``blobkit serve``, mounted at ``/tinker``.

One module per concept: :mod:`.wire` (the SDK's JSON bodies and protobuf messages), :mod:`.futures`
(request ids and long-polled outcomes), :mod:`.ordering` (``seq_id`` order per model),
:mod:`.sessions` (what a live session holds), :mod:`.host` (the operations, over one engine thread),
:mod:`.policies` (an administrator's rules), :mod:`.bases` (which bases load), :mod:`.checkpoints`
(content-addressed folders, exports), :mod:`.records` and :mod:`.tables` (train jobs, policies,
checkpoints, usage in the service store: migration ``tinker-1``), :mod:`.rest` (the SDK's REST
shapes) and :mod:`.router` (the routes). The model work itself is :mod:`trainers.tinker_engine`.
"""

from __future__ import annotations

from . import tables  # noqa: F401  (registers migration tinker-1)

MOUNT_PREFIX = "/tinker/api/v1"
