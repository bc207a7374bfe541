"""``conversation_groundedness/<method>``: how many of a conversation's turns were grounded."""
