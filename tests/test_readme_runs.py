"""Every Python block in the README runs as written, on 4 ranks (a block that is a snippet, with
no `import hvlite`, gets the names it assumes: np, hvd and an array x)."""
import pathlib
import re

import pytest

from conftest import ROOT, run_mpi

PREAMBLE = "import numpy as np\nimport hvlite as hvd\nx = np.ones(4, np.float32)\n"


def blocks():
    text = (pathlib.Path(ROOT) / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def test_the_readme_has_python_blocks():
    assert len(blocks()) >= 2


@pytest.mark.parametrize("index", range(len(blocks())))
def test_readme_block_runs(index, tmp_path):
    code = blocks()[index]
    if "import hvlite" not in code:
        code = PREAMBLE + code
    script = tmp_path / f"readme_{index}.py"
    script.write_text(code + "\nhvd.shutdown()\nprint('block ran', hvd.__name__)\n")
    out = run_mpi(4, str(script), pytest_module=False, timeout=120)
    assert out.count("block ran") == 4, out
