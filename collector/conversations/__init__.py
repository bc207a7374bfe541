"""Conversations: the turns of a chat session joined, numbered and closed into records.

:mod:`.stage` holds open conversations (bounded), gives each turn its history and closes
a conversation on idleness, an end marker or shutdown into a conversation record;
:mod:`.tiers` runs the conversation judges off the ticker. On Kafka the turns of one
conversation come through different replicas: :mod:`.turn_writer` re-keys them by
conversation id onto a topic of their own (:mod:`.turn_messages`), where
:mod:`.turn_consumer`, a consumer group of its own, brings them together.
"""
