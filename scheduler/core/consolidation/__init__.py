"""Consolidation: moving running pods to make room for a pending job, safely (plans, their rooms, the cooldowns and
budgets they keep, background defragmentation)."""
