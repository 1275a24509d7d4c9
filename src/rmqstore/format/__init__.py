"""Pure codecs for every on-disk structure (no file IO, no threads).

Each module draws its byte layout in its docstring and offers a scalar ``struct`` form and, where
batches matter, a vectorised numpy form; tests run both on the same cases.
"""
