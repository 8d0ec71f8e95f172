"""Kubeflow Pipelines components: one folder per pipeline step.

Each ``<name>/component.py`` defines one lightweight component whose body imports
``conductor_core`` and makes one call (the logic and its tests live in the library; see
``conductor_core/pipeline_steps/``). Only ``kfp`` and :mod:`conductor_components._settings` are
imported at module level, so compiling a pipeline needs neither torch nor MLflow.
"""
