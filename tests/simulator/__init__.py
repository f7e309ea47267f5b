"""Tests of the simulators (simulator/): the machine model, batched and closed-form timing, numerics,
ranks.
"""
