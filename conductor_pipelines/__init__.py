"""Kubeflow pipelines of the Conductor platform (wiring and parameters only).

* :mod:`.training`: curate -> validate -> base -> adaptive -> recursive -> sharded evaluation ->
  aggregate -> register.
* :mod:`.evaluation`: a registered model and baselines on a benchmark, sharded.
* :mod:`.curation`: the data stage alone.

Beside them: :mod:`.sharded` (the sharded evaluation both sharded pipelines end with),
:mod:`.kubernetes` (cluster settings on tasks), :mod:`.describe` (the UI's description) and
:mod:`.registry` (the pipelines by name, compiled to ``conductor_pipelines/compiled/``). What
runs them, ``conductor pipeline compile|run|submit|schedule``, is :mod:`conductor_pipeline_runner`.
"""
