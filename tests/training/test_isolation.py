"""A run's process settings are put back after it, without importing what putting them back does not need."""

from __future__ import annotations

import subprocess
import sys

# in a fresh interpreter: whether a block that changed nothing left torch's compiler imported, then the
# deterministic-algorithms setting (on, warn-only) after a block that turned it on
PUT_BACK = ("import sys, torch\n"
            "from markovformer.training.isolation import process_settings_kept\n"
            "with process_settings_kept(1):\n"
            "    pass\n"
            "print('torch._inductor' in sys.modules)\n"
            "with process_settings_kept(1):\n"
            "    torch.use_deterministic_algorithms(True, warn_only=True)\n"
            "print(torch.are_deterministic_algorithms_enabled(),\n"
            "      torch.is_deterministic_algorithms_warn_only_enabled())\n")  # fmt: skip


def test_an_unchanged_deterministic_setting_is_left_alone():
    """process_settings_kept put torch's deterministic-algorithms setting back with use_deterministic_algorithms even
    when the block had not changed it, and that call imports torch._inductor (2.3 s of a loaded 2-core CPU): an
    experiment refusing a mistyped setting waited for it. It is put back only when it changed."""
    done = subprocess.run([sys.executable, "-c", PUT_BACK], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False"]
