"""Closing a memory while it warms up in the background: the process must not abort."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from agentmemrec.ranking.memory import Memory
    home = Path(sys.argv[1])
    for i in range(8):  # closes at staggered moments of the warm-up: indexes, backfill, caches
        memory = Memory.open(home, background=False)
        memory.start_embedding(warm="notes")
        time.sleep(0.04 * i)
        memory.close()
    print("closed 8 times")
""")


def test_a_memory_closed_while_it_warms_up_closes_cleanly(default_home, tmp_path):
    """DuckDB aborts the process (C++ terminate) when its connection is closed while another
    thread's query runs on it; a one-shot command that owned the store did this now and then."""
    home = tmp_path / "home"
    shutil.copytree(default_home, home, symlinks=True)
    seed = Path(tmp_path / "seed.py")
    seed.write_text(textwrap.dedent("""
        import sys
        from pathlib import Path
        from agentmemrec.ranking.memory import Memory
        memory = Memory.open(Path(sys.argv[1]), background=False)
        memory.remember("notes", [{"kind": "note", "path": f"n{i}.md",
                                   "text": f"# Note {i}\\n\\nDeploys and queues, number {i}. " * 20}
                                  for i in range(300)])
        memory.close()
    """))
    subprocess.run([sys.executable, str(seed), str(home)], check=True, timeout=300)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(home)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "closed 8 times" in done.stdout, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
