"""The Kubeflow pipelines' steps as library calls (no KFP here): what each component runs.

:mod:`.data_steps`, :mod:`.train_steps`, :mod:`.eval_steps` and :mod:`.register_step` hold one
function per component, :mod:`.context` what they share, :mod:`.manifest` the model manifest passed
between training steps, :mod:`.params` the checks of a run's parameters.
"""
