"""Installed library versions (from package metadata, never an import) and version ranges.

A library that is not installed reads as None: the newest known behaviour applies.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator


def parse_version(text: str | None):
    """`text` as a packaging Version (PEP 440: pre-releases, dev builds, `+cpu` local versions), or None
    where it is none; a string with a version in front (`2.1.0a0+git1234`, `4.46-custom`) reads as that."""
    from packaging.version import InvalidVersion, Version

    if not isinstance(text, str) or len(text) > 200:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
        return Version(m.group(1)) if m else None


@lru_cache(maxsize=4096)
def _release(version: str):
    """The release a version stands for in memlint's tables: its release numbers, so a dev build or a
    pre-release of 4.54 (`4.54.0.dev0`, a main-branch install) and a local build (`2.13.0+cpu`) read as
    4.54 and 2.13.0; an unreadable one as 0."""
    from packaging.version import Version

    v = parse_version(version)
    return Version(v.base_version) if v is not None else Version("0")


@lru_cache(maxsize=4096)
def specifier(spec: str):
    """A version range (`>=4.32,<4.54`, `~=0.13.0`, `==4.46.*`) as a packaging SpecifierSet; ValueError
    names a malformed one."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"bad version range {spec!r}") from None


def version_key(text: str):
    """An ordering key for versions (packaging's, PEP 440)."""
    from packaging.version import Version

    return parse_version(text) or Version("0")


def in_range(version: str | None, spec: str | None) -> bool:
    """Whether `version` satisfies `spec` (">=4.32,<4.54"); None means the newest version (only ranges
    with no upper bound hold)."""
    if not spec:
        return True
    s = specifier(spec)
    if version is None:  # newest known: only lower bounds (and exclusions) hold
        return all(c.operator in (">=", ">", "!=") for c in s)
    return s.contains(_release(version), prereleases=True)


_PINNED: dict[str, str | None] = {}


@contextmanager
def pinned_versions(versions: dict[str, str | None]) -> Iterator[None]:
    """Read defaults as if these versions were installed (None: not installed). For tests."""
    saved = dict(_PINNED)
    _PINNED.update(versions)
    try:
        yield
    finally:
        _PINNED.clear()
        _PINNED.update(saved)


_CHECKOUT: list[dict] = []  # the pins of the checkout being read (library.pins.Pin by package)


@contextmanager
def checkout_versions(pins) -> Iterator[None]:
    """Read defaults at the versions the script's checkout pins (library.pins.checkout_pins), not
    the installed ones, inside the block."""
    _CHECKOUT.append({p.package: p for p in pins})  # () reads at the installed versions again
    try:
        yield
    finally:
        _CHECKOUT.pop()


def checkout_pin(package: str):
    """The checkout's pin of `package` in effect (library.pins.Pin), or None."""
    if not _CHECKOUT:
        return None
    return _CHECKOUT[-1].get(normalise(package))


def normalise(name: str) -> str:
    """A package name as pip compares it (PEP 503: runs of -_. are one -, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(package: str) -> str | None:
    """The version memlint reads `package`'s behaviour at: the checkout's pin when the script's
    checkout pins one (checkout_versions), else the installed version."""
    pin = checkout_pin(package)
    if pin is not None:
        return pin.version
    if package in _PINNED:
        return _PINNED[package]
    return _metadata_version(package)


def shown_version(package: str) -> str:
    """How a default's words name the version it was read at."""
    pin = checkout_pin(package)
    if pin is not None:
        return pin.describe()
    version = installed_version(package)
    return f"{package} {version}" if version else f"{package} (not installed: newest known)"


@lru_cache(maxsize=None)
def _metadata_version(package: str) -> str | None:
    """The installed distribution's version, from its metadata (never an import of the package).

    The common case, a `<name>-<version>.dist-info` folder on sys.path, is read directly: importing
    importlib.metadata costs 50 ms (it pulls in the email package to parse METADATA), a tenth of a
    cold `memlint check`. Anything else (eggs, zip imports, a name spelt differently) goes through
    importlib.metadata, which the fast path must agree with (tests/test_defaults_table.py)."""
    found = _dist_info_version(package)
    if found is not None:
        return found or None
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken install reads as not installed
        return None


def _dist_info_version(package: str) -> str | None:
    """The version in the first `<name>-<version>.dist-info/METADATA` on sys.path (pip's own layout, the
    name normalised as wheel file names are), "" where none is there and no other kind of install could
    be; None when importlib.metadata should decide."""
    import os
    import sys

    want = re.sub(r"[-_.]+", "_", package).lower()
    undecided = False
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except NotADirectoryError:
            undecided = True  # a zip on sys.path: importlib.metadata looks inside
            continue
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            stem = name.rsplit(".", 1)[0]
            dist, _, version = stem.partition("-")
            if re.sub(r"[-_.]+", "_", dist).lower() != want:
                continue
            if name.endswith(".egg-info"):
                return None  # an egg: importlib.metadata reads its PKG-INFO
            try:
                with open(os.path.join(entry or ".", name, "METADATA"), encoding="utf-8") as fh:
                    for line in fh:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break
            except OSError:
                return None
            return version or None
    return None if undecided else ""


def distribution_file(package: str, relative: str):
    """A file an installed distribution ships (`torchtune`'s recipes/configs/llama3_2/3B_lora_single_device.yaml), from
    its RECORD through importlib.metadata, never an import of the package; None when it is not installed or lacks it."""
    from importlib import metadata
    from pathlib import Path

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken install reads as not installed
        return None
    for f in dist.files or ():
        if str(f).replace("\\", "/") == relative:
            path = Path(dist.locate_file(f))
            return path if path.is_file() else None
    return None
