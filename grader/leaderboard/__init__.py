"""Leaderboard mode: every submission x task, each in its own sandbox, with honest aggregates.

Modules, one concern each:

* :mod:`~grader.leaderboard.state` -- the SQLite state (schema version, WAL, one
  transaction per result) that makes a killed run resumable;
* :mod:`~grader.leaderboard.submissions` -- the submission folder layout and its checks;
* :mod:`~grader.leaderboard.seeds` -- secret correctness seeds and private task copies;
* :mod:`~grader.leaderboard.job` -- one evaluation (runs on a local thread or a Ray worker);
* :mod:`~grader.leaderboard.engine` -- local and Ray engines that run jobs;
* :mod:`~grader.leaderboard.runner` -- the batch: reference checks, jobs, top-K re-runs;
* :mod:`~grader.leaderboard.aggregate` -- speed-ups, geomeans, fast_p, intervals, ranking;
* :mod:`~grader.leaderboard.render` / :mod:`~grader.leaderboard.plots` -- the static page.
"""
