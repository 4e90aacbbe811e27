"""Rendering at the edge: tables (rich) and JSON. The core never prints."""


def markup(text: object) -> str:
    """Text from the files under review, for rich markup: control characters escaped
    (memlint.vocab.printable) and `[` never read as a style tag."""
    from rich.markup import escape

    from memlint.vocab import printable

    return escape(printable(text))
