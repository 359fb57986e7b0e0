"""Objectives: loss and gradient of each model on one row block (pure numpy/numba)."""
