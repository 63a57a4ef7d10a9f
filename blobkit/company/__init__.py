"""The company pipeline: inspect an export, then train on it as a durable, budgeted, resumable job.

:func:`inspect_source` compiles and qualifies a source without training (and without writing
anything) and says plainly whether it can be trained. :func:`create_job` queues a job in a
:class:`JobStore`; :func:`run_job` runs (or resumes) it through :data:`STAGES`, checkpointing each.

The modules, one concept each:

* :mod:`.config` — :class:`CompanyConfig`: the build, SFT, RL and tiny-model configs and the budgets;
* :mod:`.inspect` — the source checks and :func:`inspect_source`;
* :mod:`.identity` — what a job is of (source sha256, base model, config);
* :mod:`.store`, :mod:`.schema`, :mod:`.workers` — the SQLite job store;
* :mod:`.budget` — the job's minutes and model calls, and the worst case of each stage;
* :mod:`.stages` — what each stage does; :mod:`.replay` — the replay in a fresh process;
* :mod:`.runner` — the claim/run loop, checkpoints, cancellation and endings;
* :mod:`.results` — the measured results, assembled from the stage records.
"""

from __future__ import annotations

from blobkit.errors import JobError, JobNotFoundError

from .budget import BUDGETS
from .config import TINY, CompanyBudgets, CompanyConfig
from .inspect import inspect_source
from .results import assemble_results
from .runner import create_job, run_job
from .stages import CHECKS, STAGES
from .store import JobStore

__all__ = ["BUDGETS", "CHECKS", "STAGES", "TINY", "CompanyBudgets", "CompanyConfig", "JobError", "JobNotFoundError",
           "JobStore", "assemble_results", "create_job", "inspect_source", "run_job"]
