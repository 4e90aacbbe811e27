"""One module per subcommand, as Ruff's `commands/`: each has `add_parser(subparsers)` and a `run`
(or `run_check`, ...) that takes the parsed arguments, calls the engines and hands their results
to report/ for rendering. `memlint.cli` only parses and dispatches."""

# In `memlint --help` order.
COMMANDS = ("check", "rule", "diff", "estimate", "plan", "measure", "clean")
