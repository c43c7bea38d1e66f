"""The model client: the one OpenAI-compatible client, its per-endpoint gate, and how a model
request is stored."""
