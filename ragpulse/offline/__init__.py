"""Offline: test sets and regression sets, and what is done with them.

Scoring a file (:mod:`.score`, :mod:`.io`), replaying a set through a changed pipeline
(:mod:`.replay`, :mod:`.report`), the test harness under adversarial conditions
(:mod:`.harness`, :mod:`.conditions`, :mod:`.testset`) with its sliced report
(:mod:`.slices`, :mod:`.slice_report`), and judge calibration (:mod:`.calibrate`).
"""
