"""What a run prints: nothing but warnings with verbose=False; on a log file (not a terminal) the progress bar
writes about one line per epoch, not one per step."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from twinkle_core import Trainer


def test_a_quiet_fit_prints_nothing(twinkle_home, cancer_csv, capfd) -> None:
    Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, verbose=False).fit(str(cancer_csv))
    out, err = capfd.readouterr()
    assert out == ""
    assert "GPU available" not in err and "TPU available" not in err and "max_epochs" not in err, err


def test_the_progress_bar_in_a_log_file_is_not_a_line_per_step(twinkle_home, cancer_csv, tmp_path) -> None:
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent(f'''
        import time
        import lightning as L
        from twinkle_core import Trainer

        class Slow(L.Callback):  # steps slower than tqdm's refresh interval
            def on_train_batch_end(self, *args):
                time.sleep(0.15)

        Trainer("tabular-mlp", hyperparams={{"max_epochs": 2, "batch_size": 64}}, callbacks=[Slow()]).fit({str(cancer_csv)!r})
    '''))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Resource plan" in proc.stdout  # verbose: the plan is explained
    # Lightning's bar is on stdout (text mode turned its carriage returns into line breaks)
    training = [line for line in proc.stdout.splitlines() if line.startswith("Epoch ")]
    assert 0 < len(training) <= 2 * 6, training  # 8 steps per epoch: 16+ updates at one per step
