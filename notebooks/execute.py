"""Re-execute the notebooks in place so their committed outputs match the code (what nbval compares against).

    .venv/bin/pip install nbclient          # once; not a test dependency
    .venv/bin/python notebooks/execute.py   # all notebooks, or name some: notebooks/execute.py quickstart.ipynb

Uses the `python3` kernel (the venv's: `python -m ipykernel install --sys-prefix`) and stores widget state,
so JupyterLab and nbviewer can show the widgets of an unexecuted copy.
"""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent

for path in [HERE / name for name in sys.argv[1:]] or sorted(HERE.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(HERE)}},
                   store_widget_state=True).execute()
    nbformat.write(nb, path)
    print("executed", path.name)
