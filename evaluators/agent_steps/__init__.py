"""``agent_steps/<method>``: how many steps (tool and model calls) an agent turn took."""
