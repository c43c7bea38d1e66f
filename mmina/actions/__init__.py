"""Actions: the agent's action grammar and where its navigation may go."""
