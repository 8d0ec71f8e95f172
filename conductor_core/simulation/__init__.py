"""Simulated worlds: question generators and the rules simulated workers follow in them.

:mod:`.workflow_world` is the world where the workflow matters (difficulty, verification,
decomposition, subtasks that are read); :mod:`.workflow_problems` generates its questions.
"""
