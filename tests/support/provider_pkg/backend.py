"""A minimal PEP 517 backend (stdlib only): a pure-Python wheel of `mateclaw_echo_provider` with the
entry points pyproject.toml declares."""

from __future__ import annotations

import base64
import hashlib
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "mateclaw_echo_provider"


def _project() -> dict:
    return tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _dist_info() -> dict[str, str]:
    project = _project()
    name, version = project["name"], project["version"]
    lines = ["[" + group + "]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
             for group, eps in project.get("entry-points", {}).items()]
    return {
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "WHEEL": "Wheel-Version: 1.0\nGenerator: backend.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "entry_points.txt": "\n".join(lines),
    }


def _stem() -> str:
    project = _project()
    return f"{project['name'].replace('-', '_')}-{project['version']}"


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None) -> str:
    folder = Path(metadata_directory) / f"{_stem()}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in _dist_info().items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    stem = _stem()
    wheel = f"{stem}-py3-none-any.whl"
    files = {f"{PACKAGE}/{p.name}": p.read_bytes() for p in sorted((HERE / PACKAGE).glob("*.py"))}
    files.update({f"{stem}.dist-info/{n}": t.encode("utf-8") for n, t in _dist_info().items()})
    record = []
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{stem}.dist-info/RECORD,,")
        zf.writestr(f"{stem}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel
