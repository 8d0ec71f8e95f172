"""Kubeflow pipelines of the Conductor platform (wiring and parameters only).

* :mod:`.training`: curate -> validate -> base -> adaptive -> recursive -> sharded evaluation ->
  aggregate -> register.
* :mod:`.evaluation`: a registered model and baselines on a benchmark, sharded.
* :mod:`.curation`: the data stage alone.

``conductor pipeline compile|run|submit`` (:mod:`.cli`) compiles them to ``pipelines/compiled/``,
runs them on KFP's local runner, or submits them to a Kubeflow Pipelines endpoint.
"""
