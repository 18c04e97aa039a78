"""Jinja templates of kvtune's Triton kernels (data files; rendered by `templates.render`)."""
