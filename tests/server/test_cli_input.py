"""The command line's answers to bad input: one line on stderr naming the flag or file and what to
do, exit 2, nothing written; and --help fast, without the training stack."""

from __future__ import annotations

import subprocess
import sys


def test_help_and_argument_registration_do_not_import_lightgbm_or_sklearn():
    code = ("import sys; from agentmemrec.server.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('lightgbm', 'sklearn', 'duckdb', 'onnxruntime') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
