"""``answer_reward/<method>``: a reward model's preference for the answer."""
