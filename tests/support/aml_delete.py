"""`python -m tests.support.aml_delete delete USER` / `… expire`: an Add/Search user deleted
(`AmlUsers.delete`, what `DELETE /v1/aml/users/{id}` calls) or the users past `aml.retention-days`
expired (`AmlUsers.expire`, the heartbeat's), in a process of its own, so that a test or the bench can
kill it between the stores (MATECLAW_MEM_CRASH_AT=aml-delete:<point>). The workspace comes from
MATECLAW_CONFIG / MATECLAW_WORKSPACE, as for `mateclaw-mem`."""

from __future__ import annotations

import json
import sys

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def main(argv: list[str]) -> int:
    op, *rest = argv
    services = Services(load_settings())
    try:
        users = services.aml_users
        if op == "delete":
            print(json.dumps(users.delete(rest[0])))
        elif op == "expire":
            print(json.dumps(users.expire()))
        else:
            raise SystemExit(f"unknown operation {op!r}")
    finally:
        services.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
