"""Forget that forgets (issue 17, point 4): `service` (ForgetService), `matching` (how a claim is
recognised and cut), `tombstones` (forget.db), `guard` (what extraction and dreaming consult)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mateclaw_mem.memory.forget.service import ForgetService


def build(services: Any) -> ForgetService:
    """`Services.forget`; imported lazily so a command that never forgets opens no database."""
    from mateclaw_mem.memory.forget.service import ForgetService

    return ForgetService.from_services(services)
