"""The one error type for bad input.

Every parser in ``scheduler.api`` raises :class:`InvalidObject` for input it cannot accept, naming the object
and the field, so that callers (the operator's handlers, the simulator's loaders) can catch one type, record an
Event or a condition for that object, and go on with everything else.
"""

from __future__ import annotations


class InvalidObject(ValueError):
    """Input that cannot be accepted: a bad quantity, a malformed PodGroup, a node with odd labels.

    ``obj`` names the object (``"pod default/train-0"``, ``"file nodes.csv line 12"``), ``field`` the field
    (``"spec.containers[0].resources.requests.cpu"``), and ``reason`` says what is wrong with it.
    """

    def __init__(self, reason: str, *, obj: str = "", field: str = "") -> None:
        self.reason = reason
        self.obj = obj
        self.field = field
        super().__init__(self._message())

    def _message(self) -> str:
        where = " ".join(part for part in (self.obj, self.field and f"field {self.field}") if part)
        return f"{where}: {self.reason}" if where else self.reason

    def located(self, *, obj: str | None = None, prefix: str = "") -> InvalidObject:
        """The same error, placed inside an enclosing object or field path."""
        field = f"{prefix}.{self.field}" if prefix and self.field else (prefix or self.field)
        return InvalidObject(self.reason, obj=obj if obj is not None else self.obj, field=field)
