"""The verifiable tasks (the paper's sense: math, multiple choice, code, free-form with a
reference), which ``conductor tasks`` lists and exports.

:mod:`.problem` is the Problem schema every stage shares; :mod:`.sources` the benchmark loaders
(one per benchmark, in its published schema); :mod:`.grading` the graders and the reward;
:mod:`.answers` the answer extraction they share; :mod:`.sandbox` the hardened sandbox the code
grader runs programs in. Not the Kubeflow pipelines' tasks: those are
:mod:`conductor_core.pipeline_steps`.
"""
