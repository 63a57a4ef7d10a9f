"""The Train panel: web pages on ``blobkit serve`` where a person trains and verifies (issue 26).

Server-rendered templates (``templates/``) with a little script (``static/panel.js``: polling, copy buttons,
local times), no build step. :mod:`.sessions` — sign-in with an API key, session cookies, CSRF tokens;
:mod:`.forms` — posted forms, size-limited and CSRF-checked; :mod:`.pages` — rendering and errors as pages;
:mod:`.views` — the charts and sentences the job page shows; :mod:`.cases` — held-out cases and their
conversations from a job's evidence; :mod:`.router` — the routes, which call the same library functions as the
JSON API.
"""

from __future__ import annotations
