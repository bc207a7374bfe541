"""``consistency/<method>``: does an answer contradict an earlier answer of its conversation?"""
