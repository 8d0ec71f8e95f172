test:
	bash scripts/setup.sh
	.venv/bin/python -m pytest -q -m "not gpu" -p no:cacheprovider

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench:
	.venv/bin/python bench/bench_executor.py
	.venv/bin/python bench/bench_eval.py
	.venv/bin/python bench/bench_sandbox_humaneval.py

.PHONY: test lint bench
