"""The policy: the Conductor model that GRPO trains, and the plan sources that ask it (or stand in
for it) for a plan.

:mod:`.base` is the plan-source interface (:class:`~.base.PlanSource`: a question in, the plan text
and its parsed workflow out), which the solve loop calls. Plan sources: a Conductor over an
OpenAI-compatible endpoint (:mod:`.openai_policy`, how a vLLM-served Conductor is called), a local
transformers model (:mod:`.local`, decoding under the plan grammar of :mod:`.plan_mask`; a batch
planned at once is handed out plan by plan by :mod:`.batched`), text already written
(:mod:`.text`, what the training reward scores), the scripted heuristic (:mod:`.scripted`) and
fixed plans (:mod:`.fixed`, the baselines); :mod:`.factory` turns ``--conductor`` into one. The
policy models themselves: the tiny-model factory (:mod:`.tiny`), the bundled pretrained model
(:mod:`.pretrained`).
"""
