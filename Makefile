.PHONY: setup test demo bench

setup:
	./scripts/setup

test:
	./scripts/test

demo:
	./scripts/demo

bench: setup
	.venv/bin/python bench/harness.py
