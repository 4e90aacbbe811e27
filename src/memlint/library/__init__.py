"""What memlint knows about the libraries training scripts use, as data: installed versions and
version ranges (`versions`), defaults with version ranges (`defaults`) and API facts (`api`).

The base layer: every stage may read it; it reads only memlint.data.
"""
