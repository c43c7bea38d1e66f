"""MMInA tasks: the task files read and checked, hops, answer checks, budgets, blocked outcomes,
and the context the official harness gives a task."""
