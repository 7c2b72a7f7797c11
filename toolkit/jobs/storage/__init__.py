"""The job store: every backend's record of its jobs.

``store`` (``JobStore``: SQLite under ``$TFDIST_HOME``, with the SQL it runs in ``_sql``), ``records`` (the snapshots
``describe`` and ``list`` return), ``states`` (the job lifecycle) and ``logs`` (following
the per-task log files).
"""
