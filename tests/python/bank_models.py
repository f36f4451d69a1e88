"""The CPU models of methods/bank_model, imported by path: that folder is not a package, and some
models import their siblings, so it also goes on sys.path."""
import importlib.util
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parents[2] / "methods" / "bank_model"


def load_model(name: str):
    """methods/bank_model/<name>.py, executed as a fresh module named `name`."""
    if str(DIR) not in sys.path:
        sys.path.insert(0, str(DIR))
    spec = importlib.util.spec_from_file_location(name, DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
