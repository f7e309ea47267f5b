"""Reproducers: when a pass crashes (a bug in nkicc or a plugin, not in the
kernel), the IR it was given, the options and the pipeline are written to a
file that `nkicc reproduce FILE` replays."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile

from .ir import NkiccError
from .ir.serialize import from_json, to_json
from .passes import PassCrash, PassOptions, registry, run_pipeline

FORMAT = "nkicc-reproducer"
VERSION = 1


def write(crash: PassCrash, directory: str | None = None) -> str:
    options = dataclasses.asdict(crash.options)
    data = {
        "format": FORMAT, "version": VERSION, "pass": crash.pass_name, "provider": crash.provider,
        "error": f"{type(crash.error).__name__}: {crash.error}",
        "traceback": crash.traceback_text(),
        "target": crash.target, "options": options, "ir": to_json(crash.kernel),
    }
    text = json.dumps(data, indent=1)
    name = f"nkicc-repro-{crash.kernel.name}-{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}.json"
    for folder in ([directory] if directory else []) + [os.getcwd(), tempfile.gettempdir()]:
        path = os.path.join(folder, name)
        try:
            with open(path, "w") as f:
                f.write(text)
            crash.path = path
            return path
        except OSError:
            continue
    return ""


def load(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise NkiccError("E204", f"cannot read reproducer {path}: {exc}", None, "give a file nkicc wrote") from None
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise NkiccError("E204", f"{path} is not an nkicc reproducer (version {VERSION})", None,
                         "give a file nkicc wrote")
    return data


def replay(path: str, printer=print):
    """Run the recorded pipeline on the recorded IR; returns the result or
    raises the same PassCrash."""
    data = load(path)
    fields = {f.name for f in dataclasses.fields(PassOptions)}
    raw = {k: tuple(v) if isinstance(v, list) else v for k, v in data["options"].items() if k in fields}
    options = PassOptions(**raw)
    reg = registry(options.no_plugins, options.plugins)
    if data["target"] not in reg.targets:
        raise NkiccError("E202", f"the reproducer's target {data['target']!r} is not registered here", None,
                         "install the plugin that provides it")
    kernel = from_json(data["ir"])
    return run_pipeline(kernel, options, reg, reg.targets[data["target"]], printer)
