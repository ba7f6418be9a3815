"""The task layer: what the engine (``contrasuite.pipelines``) and every domain share.

- :mod:`~contrasuite.core.task.protocol`: the ``Task`` a domain provides, the ``TaskContext`` it is built with,
  the ``StepContext`` of one step, the optional hooks and ``SmokeSettings``;
- :mod:`~contrasuite.core.task.config_fields`: ranges and choices on config fields, ``ObjectiveConfig``;
- :mod:`~contrasuite.core.task.errors`: the errors the CLI prints in one line with exit code 2;
- :mod:`~contrasuite.core.task.precision`: ``run.precision`` and its autocast;
- :mod:`~contrasuite.core.task.seeding`: seeds derived by hashing, for exact resume.

The rank helpers tasks use (``batch_shard``, ``rank_part``, ``average_gradients_over_ranks``) are in
:mod:`contrasuite.core.distributed`.
"""
