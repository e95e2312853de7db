"""examples/python/moe_layer.py runs and matches its plain PyTorch reference."""

import pathlib
import runpy

import pytest

from conftest import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "moe_layer.py"


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_moe_layer_example(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count(" OK") == 3 and "MISMATCH" not in out
