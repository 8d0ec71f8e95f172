"""What runs the Kubeflow pipelines of :mod:`pipelines`: ``conductor pipeline ...`` and its runners.

* :mod:`.cli`: the ``conductor pipeline`` command (compile, run, submit, schedule, close-stale,
  sandbox-policy); it joins the ``conductor`` command through the ``conductor.commands`` entry
  point, so the library never imports this package.
* :mod:`.local`: a pipeline on Kubeflow's local runner, every task a subprocess of this Python
  (the embedded default); :mod:`.local_resume` takes a killed local run up again.
* :mod:`.containers`: the compiled pipeline with every task in a container of its image (the
  cluster rehearsal, ``--docker``).
* :mod:`.submit`: a compiled pipeline uploaded to a Kubeflow Pipelines endpoint and run there, once
  or on a schedule (:mod:`.cron`: schedules as KFP reads them).
* :mod:`.summary`: the summary a local run ends with.

Layers: this package imports :mod:`pipelines` (to compile and build them), which imports
``components``, which imports ``conductor_core``; never the other way.
"""
