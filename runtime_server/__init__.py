"""agentrt runtime server: run state machines, budgets, deadlines, store and event streams."""
