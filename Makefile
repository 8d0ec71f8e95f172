test:
	bash scripts/setup.sh
	.venv/bin/python -m pytest -q -m "not gpu" -p no:cacheprovider

demo:
	bash scripts/setup.sh
	.venv/bin/conductor solve "$(DEMO_QUESTION)"

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench:
	.venv/bin/python bench/bench_executor.py

.PHONY: test demo lint bench
