"""Where training runs on a cluster: GPU/CPU pod settings, Kubeflow Trainer v2 ``TrainJob``
manifests and the launcher that creates and watches them.

* :mod:`conductor_core.cluster.settings`: the one settings model (pure pydantic + YAML);
* :mod:`conductor_core.cluster.trainjob`: ``TrainJob`` and ``ConfigMap`` manifests as plain dicts;
* :mod:`conductor_core.cluster.launcher`: create, watch, stream logs and clean up with the
  official ``kubernetes`` client (imported lazily).
* :mod:`conductor_core.cluster.versions`: the oldest Kubeflow Pipelines backend (2.17) and
  Kubeflow Trainer (2.2) these pipelines and TrainJobs work with, and their comparison.

This is the only part of ``conductor_core`` that knows about Kubernetes.
"""
