"""Simulated worlds: the simulated workers, the questions they know and the rules they follow.

The simulated worker (pool ``provider: simulated``):

* :mod:`.provider`: :class:`~.provider.SimulatedProvider`, a seeded skill profile answering
  worker messages, deterministically, with injected failures;
* :mod:`.problem_bank`: the problems simulated workers know, looked up by their question text;
* :mod:`.answers` and :mod:`.json_answers`: what a simulated worker writes (a right or wrong
  answer in its domain's format; the same as JSON for a ``response_format``);
* :mod:`.server`: the OpenAI-compatible HTTP server in front of simulated workers
  (``conductor simulate serve``).

The worlds and their questions:

* :mod:`.routing_problems`: the routing world's synthetic training set (a surface cue per
  domain), the bundled ``resources/train/problems.jsonl``;
* :mod:`.workflow_world`: the world where the workflow matters (difficulty, verification,
  decomposition, subtasks that are read); :mod:`.workflow_problems` generates its questions,
  :mod:`.workflow_baselines` and :mod:`.workflow_eval` are its hand-written workflows and their
  evaluation.
"""
