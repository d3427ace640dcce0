"""Research tools: studies that import sr but are not part of what users install.

Run from the checkout's root, e.g. ``python -m research.peers --help`` (docs/benchmarks.md).
"""
