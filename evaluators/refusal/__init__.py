"""``refusal/<method>``: does the answer decline, or say it does not know?"""
