"""``abandonment/<method>``: did the user leave right after an unsupported answer?"""
