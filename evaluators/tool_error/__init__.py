"""``tool_error/<method>``: did an agent turn's tool calls fail?"""
