"""The notebook front door, `%memcheck`: the plan read off live objects (`live`), the worst-case
step measured in place with the user's state restored (`confirm`), the result object (`result`)
and the IPython magics (`magic`). The only part of memlint besides measure/ that imports torch,
transformers or IPython."""
