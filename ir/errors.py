"""The one exception type for user mistakes. Every layer raises it; the driver
prints it as a single line: code, the kernel's file:line, what to change."""
from __future__ import annotations

from .nodes import Loc


class NkiccError(Exception):
    def __init__(self, code: str, message: str, loc: Loc | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.loc = loc
        self.hint = hint

    def one_line(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        hint = f" ({self.hint})" if self.hint else ""
        kind = "warning" if self.code.startswith("W") else "error"
        return f"{kind}[{self.code}] {where}{self.message}{hint}"

    def __str__(self) -> str:
        return self.one_line()
