"""What the Kafka turn topic carries (``kafka.conversation_topic``), one JSON object a message.

Every message but the marker is keyed by its conversation id, so a conversation's messages
share a partition and are read in the order they were written:

* ``turn``: a turn as a replica exported it (its summary, the documents kept for joining
  into later turns, the end marker); a later message for the same turn adds results
  (a costly tier's, feedback); a revision of the turn (rebuilt from late spans) names the
  span id of the turn it replaces (``replaces``) and carries all its results.
* ``closed``: the conversation record as it was exported, written after the sinks took
  it. Read again after a restart or a rebalance, it rebuilds the conversation's state
  (closed, at that revision) without exporting it again.
* ``caught_up``: written by a member of the conversation group into each partition it is
  given; reading its own marker back means it has read everything written before it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ragpulse.errors import DecodeError
from ragpulse.record import ConversationRecord, TurnSummary

VERSION = 1


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = VERSION


class TurnMessage(_Message):
    kind: Literal["turn"] = "turn"
    conversation_id: str = Field(min_length=1)
    service: str = "unknown_service"
    route: str | None = None
    turn: TurnSummary
    """``turn.turn`` 0: the replica numbered it by arrival; the conversation's holder renumbers."""
    documents: list[str] = Field(default_factory=list)
    end: bool = False
    replaces: str | None = None
    """A revision: the span id of the turn (same trace) it takes the place of."""


class ClosedMessage(_Message):
    kind: Literal["closed"] = "closed"
    conversation: ConversationRecord
    closed_at_unix: float
    """When it was exported (wall clock): how long it is still kept for resuming."""


class CaughtUpMessage(_Message):
    kind: Literal["caught_up"] = "caught_up"
    epoch: str


TurnTopicMessage = Annotated[
    TurnMessage | ClosedMessage | CaughtUpMessage, Field(discriminator="kind")
]
_ADAPTER: TypeAdapter[TurnMessage | ClosedMessage | CaughtUpMessage] = TypeAdapter(TurnTopicMessage)


def encode(message: TurnMessage | ClosedMessage | CaughtUpMessage) -> bytes:
    return message.model_dump_json().encode()


def decode(value: bytes) -> TurnMessage | ClosedMessage | CaughtUpMessage:
    """The message in ``value``; DecodeError (a poison message) when it is none."""
    try:
        return _ADAPTER.validate_json(value)
    except ValidationError as exc:
        raise DecodeError(f"not a turn-topic message: {exc.errors()[0]['msg']}") from exc
