"""Local CPU models for the model tier: loading, chunking, and our own small models.

Installed with the ``models`` extra (torch, transformers, sentence-transformers
and the packaged all-MiniLM-L6-v2 weights). Nothing here is imported unless a
model-tier evaluator is selected, so the core stays light.
"""
