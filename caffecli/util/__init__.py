"""Helpers shared by net, layers and solvers."""
