"""memlint: will this fine-tuning run fit on the GPU, and which line do I change?"""

import sys as _sys


def _drop_the_working_directory() -> None:
    """`python -m memlint` puts the working directory first on sys.path, and memlint runs in checkouts it does not
    trust: a `tomllib.py` or `json.py` there would be imported instead of the standard library's, and run. While
    runpy imports this package for `-m` (sys.argv[0] is "-m" then), the entry goes before anything else is
    imported, as `python -P` would leave it out. Only builtin modules (never looked up on sys.path) are used."""
    if not _sys.argv or _sys.argv[0] != "-m" or not _sys.path:
        return
    try:
        import posix as _os
    except ImportError:  # pragma: no cover - Windows
        import nt as _os  # type: ignore[no-redef]
    if _sys.path[0] in ("", ".", _os.getcwd()):
        del _sys.path[0]


_drop_the_working_directory()

__version__ = "0.1.0"
# This project's home (pyproject.toml [project.urls]): the rule links in JSON and SARIF point under it.
__url__ = "https://github.com/memlint/memlint"


def load_ipython_extension(ip):  # noqa: ANN001 - IPython's shell, imported only here
    """`%load_ext memlint`: IPython is imported only when a notebook loads the extension."""
    from memlint.notebook.magic import load_ipython_extension as load

    load(ip)
