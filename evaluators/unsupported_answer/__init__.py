"""``unsupported_answer/<method>``: tools were called, yet no tool result grounds the answer."""
