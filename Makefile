test:
	bash scripts/setup.sh
	.venv/bin/python -m pytest -q -m "not gpu" -p no:cacheprovider

# Unit tests without the slow ones (markers: tests/conftest.py); under a minute on 2 cores.
test-fast:
	test -x .venv/bin/python || bash scripts/setup.sh
	.venv/bin/python -m pytest -q -m "unit and not slow" -p no:cacheprovider tests/unit

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench:
	.venv/bin/python bench/bench_executor.py
	.venv/bin/python bench/bench_eval.py
	.venv/bin/python bench/bench_sandbox_humaneval.py

.PHONY: test test-fast lint bench
