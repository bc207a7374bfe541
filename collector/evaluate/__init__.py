"""Evaluation: records sampled by tier, scored, and handed to the sinks.

:mod:`.pipeline` runs the cheap tier on every record and exports it; :mod:`.sampling`
decides, deterministically by trace id, which records a costly tier also scores; each
costly tier (local models, LLM judges) is a :mod:`.tier_stage` with its own worker,
bounded queue, deadline and budget, whose results follow the cheap ones as updates;
:mod:`.feedback` joins users' feedback to the records it is about; :mod:`.exports`
is the sinks, which every export goes through one at a time.
"""
