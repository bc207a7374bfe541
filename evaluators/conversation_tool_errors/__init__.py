"""``conversation_tool_errors/<method>``: turns of a conversation whose tools failed."""
