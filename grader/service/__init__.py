"""``kgrader serve``: an HTTP API over a durable queue of evaluations and a live board.

``store`` (SQLite: tokens, jobs, events), ``auth`` (hashed tokens, roles, rate limits),
``worker`` (the workers and :func:`worker.grade`, the one call they grade through),
``board`` (the live leaderboard page), ``app`` (the routes), ``server`` (wiring and
uvicorn), ``client`` (what ``kgrader submit``/``status``/``report`` call). docs/service.md.
"""
