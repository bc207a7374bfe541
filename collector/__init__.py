"""Intake, assembly, extraction and the evaluation pipeline."""
