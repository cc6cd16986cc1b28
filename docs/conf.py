"""Sphinx configuration of the documentation site.

Build it from a checkout with the ``docs`` extra installed::

    pip install -e '.[docs]'
    sphinx-build -W --keep-going docs docs/_build/html

``tests/test_docs_site.py`` builds it the same way (warnings are errors) and runs
the examples of the tutorial and the how-to guides against real servers.  The
build needs no network: no intersphinx inventories are fetched.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))       # the checkout: autodoc imports from it
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "twisted-stalk"
author = "the twisted-stalk authors"
copyright = "the twisted-stalk authors, MIT licence"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "programhelp",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "deploy", "examples", "images/*.md"]

# Links such as [Quick start](#quick-start) in the existing pages.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# The client's reference, from its docstrings.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "exclude-members": "log"}
# Docstrings are written for readers (``code`` and :mod: roles), not for
# cross-referencing every type: an unresolved type name is not an error.
nitpicky = False

html_theme = "alabaster"
html_title = "twisted-stalk"
html_static_path = []
