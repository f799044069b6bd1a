"""Upgrades of old net and solver files (V0/V1 layers, legacy inputs, solver_type enum)."""


def upgrade_net_as_needed(param, source="<net>"):
    return param


def upgrade_solver_as_needed(param, source="<solver>"):
    return param
