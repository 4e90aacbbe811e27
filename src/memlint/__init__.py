"""memlint: will this fine-tuning run fit on the GPU, and which line do I change?"""

__version__ = "0.1.0"
# This project's home (pyproject.toml [project.urls]): the rule links in JSON and SARIF point under it.
__url__ = "https://github.com/memlint/memlint"


def load_ipython_extension(ip):  # noqa: ANN001 - IPython's shell, imported only here
    """`%load_ext memlint`: IPython is imported only when a notebook loads the extension."""
    from memlint.notebook.magic import load_ipython_extension as load

    load(ip)
