"""The job model: what a job is, independent of where it runs.

``spec`` (``JobSpec``, read from a CMLE job config by ``_cmle`` or a Vertex AI custom
job by ``_vertex``, with ``_training_input``, ``_fields`` and ``_hygiene`` doing the
field-by-field reading), ``tiers`` (scale tiers and machine types), ``limits`` and
``_exec_limits`` (how big a job may be), ``names`` (job names) and ``hyperparams``
(the tuning spec). Pure data: nothing here starts a process or touches the store.
"""
