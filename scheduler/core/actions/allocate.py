"""The allocate action: place the attempt's pods, all or none, and commit the placement as one statement.

A single pod (or a gang's member tried alone) runs one scheduling cycle on the snapshot; ``minMember`` members of
a gang are placed one after another on what-ifs of it (``scheduler.core.gang``), inside each domain its topology
allows until one holds them all. Nothing is committed before every member has its place; then every member is
assumed in the cache and handed to the binder (one ``place`` step of the session's statement).
"""

from __future__ import annotations

from scheduler.cache.state import Snapshot
from scheduler.core import gang
from scheduler.core.actions import Action, Outcome, Setting, Verdict
from scheduler.core.jobs import Attempt
from scheduler.core.statement import Statement


class Allocate(Action):
    name = "allocate"

    def __init__(self, setting: Setting) -> None:
        self.scheduler = setting.scheduler

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        group = attempt.job.group
        if attempt.whole_gang:
            assert group is not None
            planned = gang.plan_gang(self.scheduler, snapshot, group, attempt.members, attempt.context)
            status, decisions, diagnosis = planned.status, planned.decisions, planned.diagnosis
        else:
            result = self.scheduler.place(attempt.members[0], snapshot, attempt.context)
            status, diagnosis = result.status, result.diagnosis
            attempt.reasons = result.reasons
            decisions = [result.decision] if result.decision is not None and status.ok else []
        if not status.ok or not decisions:
            return Outcome(Verdict.NOTHING, status, diagnosis=diagnosis)
        statement.place(decisions)
        return Outcome(Verdict.PLACED, status, tuple(decisions))
