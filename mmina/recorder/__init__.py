"""Recording: the browser session, observation capture, actions, HAR capture and run orchestration."""
