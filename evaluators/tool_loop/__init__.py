"""``tool_loop/<method>``: did an agent repeat the same tool call?"""
