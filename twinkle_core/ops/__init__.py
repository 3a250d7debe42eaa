"""Run operations: alert rules and monitoring, budgets, tuning, data verification and memory handling."""
