"""What the CLI says about exposure: --no-isolate warns, in one line, that the task ports are reachable."""
from __future__ import annotations

from toolkit.cli import main
from toolkit.cli.launch_cmd import NO_ISOLATE_WARNING


def test_no_isolate_says_once_that_the_ports_are_reachable(tmp_path, capsys, no_orphans):
    code = main(["launch", "--no-isolate", "--workers", "1", "--job-dir", str(tmp_path / "open"), "--",
                 "python", "-c", "pass"])
    err = capsys.readouterr().err
    assert code == 0 and err.count(NO_ISOLATE_WARNING) == 1
    assert "reachable from the network" in NO_ISOLATE_WARNING and "\n" not in NO_ISOLATE_WARNING
    code = main(["launch", "--workers", "1", "--job-dir", str(tmp_path / "default"), "--", "python", "-c", "pass"])
    assert code == 0 and NO_ISOLATE_WARNING not in capsys.readouterr().err
