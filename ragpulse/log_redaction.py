"""Redaction of log lines: what a log shipper carries off the machine.

A log line can quote content: a refused request's decoder error echoes the
offending value, an evaluator's exception names its input, a traceback shows
local strings. :class:`RedactingFilter` rewrites each record before any
handler formats it: the message with its arguments merged, the formatted
traceback, the stack. It sits on the root logger's handlers, where the records
of every logger (ragpulse's, aiohttp's, kafka-python's) pass; a filter on a
logger would miss the records its children propagate.
"""

from __future__ import annotations

import logging

from ragpulse.config import Settings
from ragpulse.redaction import Redactor

_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    """Redacts a record in place; never drops one, never raises."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_ragpulse_redacted", False):
            return True  # a second handler sees the record already rewritten
        try:
            self._redact(record)
        except Exception:  # a log call must never fail because of redaction
            record.msg, record.args = "[log line withheld: redaction failed]", ()
            record.exc_info = record.exc_text = record.stack_info = None
        record._ragpulse_redacted = True
        return True

    def _redact(self, record: logging.LogRecord) -> None:
        redact = self.redactor.redact
        # The message with its arguments merged: args may be any objects, and a
        # %r of an exception or a dict carries its text.
        try:
            message = record.getMessage()
        except Exception:  # a format/args mismatch: keep both, as logging would show them
            message = f"{record.msg} (arguments: {record.args!r})"
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            # Formatters print exc_text when set and format exc_info only when not.
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)


def install_log_redaction(
    settings: Settings, logger: logging.Logger | None = None
) -> RedactingFilter | None:
    """Put a :class:`RedactingFilter` on every handler of ``logger`` (the root logger).

    Call it once logging is configured (after ``logging.basicConfig``): handlers
    added later are not covered. It replaces a filter installed earlier, so the
    latest settings win; with ``logs`` not in ``redaction.apply_to`` (or
    redaction off) it only removes it. Returns the filter installed (None: log
    lines are not redacted), for :func:`remove_log_redaction`.
    """
    target = logger or logging.getLogger()
    redactor = Redactor.from_settings(settings, "logs")
    installed = RedactingFilter(redactor) if redactor.enabled and target.handlers else None
    for handler in target.handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(old)
        if installed is not None:
            handler.addFilter(installed)
    return installed


def remove_log_redaction(
    installed: RedactingFilter | None = None, logger: logging.Logger | None = None
) -> None:
    """Take ``installed`` (default: every :class:`RedactingFilter`) off ``logger``'s
    (the root logger's) handlers; one replaced since is left alone."""
    for handler in (logger or logging.getLogger()).handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            if installed is None or old is installed:
                handler.removeFilter(old)
