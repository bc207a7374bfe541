"""Cheap, model and judge evaluators, one metric family per module."""
